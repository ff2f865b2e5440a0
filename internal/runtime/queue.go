package runtime

// Queue is the buffer of a channel's receiving end: a FIFO of events that
// holds at most its capacity of ordinary events (Full), plus the events
// pushed with Overtake, which take no room (a network channel sends them
// without a credit). Not safe for concurrent use: its channel guards it.
type Queue struct {
	// buf[head:] are the queued events, oldest first.
	buf      []Event
	head     int
	capacity int
	// priority counts the queued events pushed with Overtake.
	priority int
}

// NewQueue returns a queue of capacity ordinary events.
func NewQueue(capacity int) Queue {
	return Queue{buf: make([]Event, 0, capacity+2), capacity: capacity}
}

// Len is the number of queued events.
func (q *Queue) Len() int { return len(q.buf) - q.head }

// PriorityLen is the number of queued events pushed with Overtake or
// PushPriority.
func (q *Queue) PriorityLen() int { return q.priority }

// Full reports whether the queue holds its capacity of ordinary events.
func (q *Queue) Full() bool { return q.Len()-q.priority >= q.capacity }

// SetCapacity changes the capacity (buffer debloating). A queue holding
// more than a smaller capacity keeps its events: it is Full until it has
// drained below it.
func (q *Queue) SetCapacity(n int) { q.capacity = n }

// Push appends e, an ordinary event; the caller checked Full. NB: it
// clears e.Priority, which an event taken after an Overtake carries: were
// it pushed on with it set, Pop would count a priority event never
// counted, and the queue would lose a unit of room for good.
func (q *Queue) Push(e Event) {
	q.compact()
	e.Priority = false
	q.buf = append(q.buf, e)
}

// PushPriority appends e beyond the capacity: it takes no room (a network
// channel sends it without a credit). See OutputChannel.ForcePush.
func (q *Queue) PushPriority(e Event) {
	q.compact()
	e.Priority = true
	q.buf = append(q.buf, e)
	q.priority++
}

// PopControl takes the oldest event if it is a barrier or a cancel marker.
func (q *Queue) PopControl() (Event, bool) {
	if q.head == len(q.buf) {
		return Event{}, false
	}
	if k := q.buf[q.head].Kind; k != KindBarrier && k != KindCancel {
		return Event{}, false
	}
	return q.Pop()
}

// Pop takes the oldest event, if any.
func (q *Queue) Pop() (Event, bool) {
	if q.head == len(q.buf) {
		return Event{}, false
	}
	e := q.buf[q.head]
	q.buf[q.head] = Event{}
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	}
	if e.Priority {
		q.priority--
	}
	return e, true
}

// compact moves the queued events to the front of buf once half of it is
// spent, so that appends reuse it.
func (q *Queue) compact() {
	if q.head == 0 || q.head < cap(q.buf)/2 {
		return
	}
	n := copy(q.buf, q.buf[q.head:])
	clear(q.buf[n:])
	q.buf, q.head = q.buf[:n], 0
}

// Overtake queues barrier b ahead of the batches, watermarks, idleness and
// end of data queued since the last barrier or cancel marker (those keep
// their order before it), and tail, if it is a batch, at the end: b's
// Overtaken counts the batches it passed, tail included. Both take no room.
// NB: it passes end of data, or a checkpoint would wait, behind an upstream
// that ended, for the backlog it left; only the final checkpoint must
// follow end of data, and it aligns (it is never overtaking).
func (q *Queue) Overtake(b, tail Event) {
	q.compact()
	at := len(q.buf)
	for at > q.head {
		if k := q.buf[at-1].Kind; k == KindBarrier || k == KindCancel {
			break
		}
		at--
	}
	if tail.Kind == KindBatch {
		tail.Priority = true
		q.buf = append(q.buf, tail)
		q.priority++
	}
	b.Priority, b.Overtaken = true, 0
	for _, e := range q.buf[at:] {
		if e.Kind == KindBatch {
			b.Overtaken++
		}
	}
	q.buf = append(q.buf, Event{})
	copy(q.buf[at+1:], q.buf[at:])
	q.buf[at] = b
	q.priority++
}

// Promote lets the barriers queued since deadline (Unix nanoseconds) or
// earlier by their trigger (Event.Time), which need not align, overtake
// the batches ahead of them, as Overtake places a barrier: the
// aligned-checkpoint timeout makes a checkpoint unaligned once it is due,
// whether its barriers reached the task or still wait in its input. A
// promoted barrier keeps its Priority (whether it took room); its
// Overtaken counts the batches it passed, as Overtake's. (An overtaking
// barrier has none ahead of it since the last barrier: it stays.)
func (q *Queue) Promote(deadline int64) {
	from := q.head // after the last barrier or cancel marker
	batches := 0   // batches queued since from
	for i := q.head; i < len(q.buf); i++ {
		e := q.buf[i]
		switch e.Kind {
		case KindBatch:
			batches++
			continue
		case KindBarrier:
			if batches > 0 && !e.Aligned && e.Time != 0 && e.Time <= deadline {
				e.Overtaken += batches
				copy(q.buf[from+1:i+1], q.buf[from:i])
				q.buf[from] = e
			}
		case KindCancel:
		default:
			continue
		}
		from, batches = i+1, 0
	}
}

// Batches appends to dst the first k queued batches: those a barrier just
// taken overtook. They stay queued.
func (q *Queue) Batches(k int, dst []Event) []Event {
	for _, e := range q.buf[q.head:] {
		if k == 0 {
			break
		}
		if e.Kind == KindBatch {
			dst = append(dst, e)
			k--
		}
	}
	return dst
}
