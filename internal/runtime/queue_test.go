package runtime

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

// label names an event for the tests: a batch by its record, a barrier
// by its id with what it overtook, "!" marking a priority event.
func label(e Event) string {
	var s string
	switch e.Kind {
	case KindBatch:
		s = e.Batch.([]string)[0]
	case KindBarrier:
		s = fmt.Sprintf("b%d", e.ID)
		if e.Priority {
			s += fmt.Sprintf("/%d", e.Overtaken)
		}
	case KindCancel:
		s = fmt.Sprintf("c%d", e.ID)
	case KindEndOfData:
		s = "eod"
	case KindWatermark:
		s = fmt.Sprintf("w%d", e.Time)
	case KindIdle:
		s = "idle"
	}
	if e.Priority {
		s += "!"
	}
	return s
}

// queued labels q's events, oldest first, taking none.
func queued(q *Queue) string {
	var s []string
	for _, e := range q.buf[q.head:] {
		s = append(s, label(e))
	}
	return strings.Join(s, " ")
}

func rec(r string) Event { return Event{Kind: KindBatch, Batch: []string{r}} }

func bar(id int) Event { return Event{Kind: KindBarrier, ID: checkpoint.ID(id)} }

// TestQueueOvertake: a barrier overtakes what came since the last barrier,
// cancel marker or end of data, counting the batches, its tail last.
func TestQueueOvertake(t *testing.T) {
	cases := []struct {
		name   string
		before []Event // pushed
		pops   int     // taken before the barrier comes
		tail   Event
		want   string
	}{
		{"empty", nil, 0, Event{}, "b9/0!"},
		{"empty with a tail", nil, 0, rec("t"), "b9/1! t!"},
		{"batches", []Event{rec("x"), rec("y")}, 0, Event{}, "b9/2! x y"},
		{"batches with a tail", []Event{rec("x"), rec("y")}, 0, rec("t"), "b9/3! x y t!"},
		{"watermarks and idleness", []Event{rec("x"), {Kind: KindWatermark, Time: 4}, {Kind: KindIdle}, rec("y")}, 0, Event{}, "b9/2! x w4 idle y"},
		{"a non-batch tail is none", []Event{rec("x")}, 0, Event{Kind: KindIdle}, "b9/1! x"},
		{"behind a barrier", []Event{rec("x"), bar(1), rec("y")}, 0, rec("t"), "x b1 b9/2! y t!"},
		{"behind a cancel marker", []Event{rec("x"), {Kind: KindCancel, ID: 2}, rec("y")}, 0, Event{}, "x c2 b9/1! y"},
		{"ahead of end of data", []Event{rec("x"), {Kind: KindEndOfData}}, 0, Event{}, "b9/1! x eod"},
		{"behind a barrier last", []Event{rec("x"), bar(1)}, 0, Event{}, "x b1 b9/0!"},
		{"after pops", []Event{rec("x"), rec("y"), rec("z")}, 2, Event{}, "b9/1! z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := NewQueue(4)
			for _, e := range tc.before {
				q.Push(e)
			}
			for range tc.pops {
				q.Pop()
			}
			q.Overtake(bar(9), tc.tail)
			if got := queued(&q); got != tc.want {
				t.Fatalf("queued %q, want %q", got, tc.want)
			}
		})
	}
}

// A second overtaking barrier stays behind the first, and counts the
// batches the first overtook too: both checkpoints hold them as state.
func TestQueueOvertakesTwice(t *testing.T) {
	q := NewQueue(4)
	q.Push(rec("x"))
	q.Overtake(bar(1), Event{})
	q.Push(rec("y"))
	q.Overtake(bar(2), rec("t"))
	if got, want := queued(&q), "b1/1! b2/3! x y t!"; got != want {
		t.Fatalf("queued %q, want %q", got, want)
	}
	for _, want := range []string{"b1/1! x", "b2/3! x y t!"} {
		b, _ := q.Pop()
		got := []string{label(b)}
		for _, e := range q.Batches(b.Overtaken, nil) {
			got = append(got, label(e))
		}
		if strings.Join(got, " ") != want {
			t.Fatalf("took %q, want %q", got, want)
		}
	}
}

// Full counts the events pushed, not those that overtook: an overtaking
// barrier and its tail take no room, and free none when taken.
func TestQueueFullIgnoresPriorityEvents(t *testing.T) {
	q := NewQueue(2)
	q.Overtake(bar(1), rec("t1"))
	if q.Full() {
		t.Fatal("full with no event pushed")
	}
	q.Push(rec("x"))
	q.Push(rec("y"))
	if !q.Full() {
		t.Fatal("not full with its capacity pushed")
	}
	q.Overtake(bar(2), rec("t2"))
	if !q.Full() || q.Len() != 6 {
		t.Fatalf("full %v, %d queued: want full, 6", q.Full(), q.Len())
	}
	for _, want := range []string{"b1/1!", "b2/4!", "t1!"} {
		if e, _ := q.Pop(); label(e) != want {
			t.Fatalf("took %s, want %s", label(e), want)
		}
		if !q.Full() {
			t.Fatalf("taking %s freed room", want)
		}
	}
	if e, _ := q.Pop(); label(e) != "x" || q.Full() {
		t.Fatalf("took %s (full %v), want x and room", label(e), q.Full())
	}
}

// An event taken after an overtake (Priority set) and pushed on, to this
// queue or another, is an ordinary event there: it takes room.
func TestQueuePushIsNeverPriority(t *testing.T) {
	from := NewQueue(1)
	from.Overtake(bar(1), rec("t"))
	q := NewQueue(2)
	for range 2 {
		e, _ := from.Pop()
		q.Push(e)
	}
	if !q.Full() {
		t.Fatalf("two events pushed, %q, do not fill a queue of 2", queued(&q))
	}
	q.Pop()
	q.Pop()
	for i := range 2 {
		if q.Full() {
			t.Fatalf("full after %d pushes into an empty queue of 2", i)
		}
		q.Push(rec("x"))
	}
	if !q.Full() {
		t.Fatal("not full after 2 pushes into an empty queue of 2")
	}
}

// Batches gives the first k queued batches, skipping other events, and
// leaves them queued.
func TestQueueBatches(t *testing.T) {
	q := NewQueue(8)
	for _, e := range []Event{{Kind: KindWatermark, Time: 1}, rec("x"), {Kind: KindIdle}, rec("y"), bar(3), rec("z")} {
		q.Push(e)
	}
	q.Pop()
	for k, want := range []string{"", "x", "x y", "x y z", "x y z"} {
		var got []string
		for _, e := range q.Batches(k, nil) {
			got = append(got, label(e))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("Batches(%d) = %q, want %q", k, got, want)
		}
	}
	dst := q.Batches(1, []Event{rec("kept")})
	if len(dst) != 2 || label(dst[0]) != "kept" || label(dst[1]) != "x" {
		t.Errorf("Batches does not append to dst: %v", dst)
	}
	if got, want := queued(&q), "x idle y b3 z"; got != want {
		t.Errorf("queued %q after Batches, want %q", got, want)
	}
}

// TestQueueMatchesModel runs random pushes, pops and overtakes against a
// plain slice that inserts where the rule says.
func TestQueueMatchesModel(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		capacity := 1 + rng.IntN(6)
		q := NewQueue(capacity)
		var model []Event
		id := 0
		for step := range 300 {
			var op string
			switch r := rng.IntN(10); {
			case r < 5:
				var e Event
				switch rng.IntN(6) {
				case 0:
					id++
					e = bar(id)
				case 1:
					e = Event{Kind: KindWatermark, Time: int64(step)}
				default:
					e = rec(fmt.Sprint("r", step))
				}
				op = "push " + label(e)
				if q.Full() {
					break
				}
				q.Push(e)
				model = append(model, e)
			case r < 8:
				want, ok := Event{}, len(model) > 0
				if ok {
					want, model = model[0], model[1:]
				}
				got, gotOK := q.Pop()
				op = "pop " + label(want)
				if gotOK != ok || label(got) != label(want) {
					t.Fatalf("seed %d step %d: popped %s, %v: want %s, %v", seed, step, label(got), gotOK, label(want), ok)
				}
			default:
				id++
				var tail Event
				if rng.IntN(2) == 0 {
					tail = rec(fmt.Sprint("t", step))
				}
				op = fmt.Sprintf("overtake b%d", id)
				q.Overtake(bar(id), tail)
				model = modelOvertake(model, bar(id), tail)
			}
			var want []string
			ordinary := 0
			for _, e := range model {
				want = append(want, label(e))
				if !e.Priority {
					ordinary++
				}
			}
			if got := queued(&q); got != strings.Join(want, " ") {
				t.Fatalf("seed %d step %d (%s): queued %q, want %q", seed, step, op, got, strings.Join(want, " "))
			}
			if q.Full() != (ordinary >= capacity) || q.Len() != len(model) {
				t.Fatalf("seed %d step %d (%s): full %v, len %d; want %v, %d", seed, step, op, q.Full(), q.Len(), ordinary >= capacity, len(model))
			}
		}
	}
}

// modelOvertake is Queue.Overtake on a plain slice.
func modelOvertake(m []Event, b, tail Event) []Event {
	at := 0
	for i, e := range m {
		if e.Kind == KindBarrier || e.Kind == KindCancel {
			at = i + 1
		}
	}
	if tail.Kind == KindBatch {
		tail.Priority = true
		m = append(m, tail)
	}
	b.Priority, b.Overtaken = true, 0
	for _, e := range m[at:] {
		if e.Kind == KindBatch {
			b.Overtaken++
		}
	}
	return slices.Insert(m, at, b)
}

// Pushes and pops of ordinary events reuse the queue's buffer, at every
// fill level, and so do overtakes once the buffer has grown for them. NB:
// "once grown": NewQueue makes room for capacity+2 events and compact
// moves them only once head passes half of it, so a queue filled, half
// emptied and filled again grows its buffer once (to about twice that)
// on Push; AllocsPerRun's warm-up run takes that allocation.
func TestQueueReusesItsBuffer(t *testing.T) {
	const capacity = 10
	q := NewQueue(capacity)
	e := rec("x")
	// fill pushes while there is room and takes every other time, so that
	// the queue runs at every level from empty to full.
	cycle := func() {
		for range capacity {
			q.Push(e)
			if q.Len()%3 == 0 {
				q.Pop()
			}
		}
		for !q.Full() {
			q.Push(e)
		}
		for range capacity / 2 {
			q.Pop()
			q.Push(e)
			q.Pop()
		}
		for range q.Len() {
			q.Pop()
		}
	}
	if n := testing.AllocsPerRun(200, cycle); n != 0 {
		t.Errorf("%v allocations per cycle of pushes and pops", n)
	}
	withOvertakes := func() {
		q.Push(e)
		q.Overtake(bar(1), e)
		cycle()
	}
	if n := testing.AllocsPerRun(200, withOvertakes); n != 0 {
		t.Errorf("%v allocations per cycle of pushes, pops and an overtake", n)
	}
}
