// Package transport carries channels between processes: one connection per
// pair of processes, logical channels multiplexed over it as length-prefixed
// frames, with credit-based flow control per channel.
//
// A receiver grants credits: an Input of capacity c grants c when it opens
// and one more each time its task takes an event (sent together, a quarter
// of the window at a time: see corkBytes). A sender sends an event
// only with a credit in hand, so a receiver never buffers more than c
// events of a channel, and a channel whose task does not read (a channel
// blocked by barrier alignment) stalls its own sender only: the connection's
// reader never waits for a task, and the other channels keep flowing.
// Barriers, cancel markers, watermarks and end-of-data travel in-band as
// events, so the task's aligner serves remote channels as it serves local
// ones. The one exception to credits is a barrier of an unaligned
// checkpoint (Output.Overtake): it is sent without a credit, so that it
// passes a full window, and the receiver queues it ahead of the events it
// holds (runtime.Queue.Overtake), beyond its capacity; taking it grants no
// credit back. A receiver holds at most maxOvertaking of them. A sender
// holds back such frames (and forced events) until the receiver has
// opened the channel, which its first credits say.
//
// A connection fails as a whole, on the first error: a malformed frame (an
// ErrProtocol, naming what was wrong), a lost peer, a peer silent for the
// idle timeout (ErrPeerSilent: a cut network loses no connection by itself,
// and TCP may take minutes to notice), Close. A failed
// connection's pending pushes return the error; its owner watches Done and
// fails the tasks it served.
package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/internal/runtime"
)

// maxCredits bounds one channel's credits: a receiver never grants more
// (its capacity is smaller), so more is a protocol violation.
const maxCredits = 1 << 16

// maxChannels bounds the channels of one connection.
const maxChannels = 1 << 16

// maxOvertaking bounds the events an Input holds that came without a
// credit: overtaking barriers with their tails, and forced events. Without
// a bound a peer could fill the receiver's memory. A sender forwards one
// barrier per unaligned checkpoint (at most 64 pending at once,
// checkpoint.MaxConcurrentLimit), and forces at most
// runtime.MaxForced events on a channel between two times it finds room,
// which it finds at most once per event the receiver takes: so many take
// a task that holds the channel's capacity and takes nothing for many
// checkpoint timeouts.
const maxOvertaking = 1 << 14

// A connection keeps frames it wrote for outputs to encode the next ones
// into: at most maxFree frames of at most maxFreeBytes together, none
// larger than maxFreeFrameBytes. A batch's frame is a few KiB (512 words:
// about 5 KiB); a frame of large records is allocated anew rather than
// kept, so a burst of them does not leave a connection holding their
// memory.
const (
	maxFree           = 64
	maxFreeBytes      = 4 << 20
	maxFreeFrameBytes = 256 << 10
)

// The frames of batches and the credits a connection's channels queue wait
// for one another before the writer takes them (corking): a wake of the
// writer, a write and the peer's wake to read it cost more CPU than the
// frame's encoding (note 118). The writer is woken for what is queued when
// corkBytes of frames are, when an output is flushed (its task goes idle
// or waits: runtime.Flusher), for any event but a batch (a barrier, a
// watermark, the end), when a channel's credits to send reach a quarter of
// its window or its window shrinks, and at the latest corkDelay after the
// first frame or credit held. Credits below a quarter are not flushed
// with the task's outputs: the sender holds three quarters of the window
// meanwhile.
const (
	corkBytes = 32 << 10
	corkDelay = time.Millisecond
)

// ErrClosed is the error of a connection closed by its owner.
var ErrClosed = errors.New("transport: connection closed")

// FrameTimeout bounds how long a frame may take to arrive once its first
// byte has, and the peer's greeting from the start: a peer that stops
// half-way through a frame (or a planted connection that holds a partial
// one) fails the connection instead of stalling its channels for ever. A
// connection may idle between frames without limit.
const FrameTimeout = 30 * time.Second

// ErrFrameStalled is the error of a connection whose peer stopped sending
// half-way through a frame, or never greeted.
var ErrFrameStalled = errors.New("transport: a frame stalled")

// ErrPeerSilent is the error of a connection whose peer sent nothing, not
// even a keep-alive, for the idle timeout: the network between them is
// cut, or the peer hangs.
var ErrPeerSilent = errors.New("transport: the peer went silent")

// Conn multiplexes channels over one network connection. Its methods are
// safe for concurrent use.
type Conn struct {
	nc   net.Conn
	peer string // for errors
	// frameTimeout is FrameTimeout (shorter in tests).
	frameTimeout time.Duration
	// idleTimeout bounds the peer's silence between frames; the
	// writer sends a keep-alive after a quarter of it without writing.
	idleTimeout time.Duration

	mu      sync.Mutex
	outputs map[uint64]*Output
	inputs  map[uint64]*Input
	queue   [][]byte // frames for the writer, in order
	// free holds frames written, for outputs to encode the next ones
	// into (see maxFree); freeBytes is their capacities' sum.
	free      [][]byte
	freeBytes int
	grant     map[uint64]int // credits to send, by channel
	err       error
	done      chan struct{} // closed when err is set
	wake      chan struct{} // the writer has work
	// corked counts the bytes of the frames queued since the writer last
	// took the queue. held: what is queued may wait for more (corking); a
	// wake of the writer then leaves it, unless due: something must go
	// now. uncork makes it due corkDelay after the first was held;
	// armed: it was started and has not fired (a Stop that lost the race
	// with firing makes an early release at worst).
	corked int
	held   bool
	due    bool
	armed  bool
	uncork *time.Timer
	// holdFor is corkDelay (longer in tests); guarded by mu.
	holdFor time.Duration

	wg sync.WaitGroup
}

// New starts multiplexing over nc, which it owns from now on: it greets
// the peer and runs a reader and a writer goroutine until the connection
// fails or Close. Between frames, the peer must be heard from at least
// every idleTimeout (it sends keep-alives when it has nothing else to say,
// as this side does), else the connection fails with ErrPeerSilent; a
// cluster passes its heartbeat timeout, so that a cut data path fails the
// attempt as soon as a lost worker would. A frame once begun has
// FrameTimeout to arrive whole, and the greeting as long.
func New(nc net.Conn, idleTimeout time.Duration) *Conn {
	if idleTimeout <= 0 {
		panic(fmt.Sprintf("transport: idle timeout %v", idleTimeout))
	}
	return newConn(nc, FrameTimeout, idleTimeout)
}

func newConn(nc net.Conn, frameTimeout, idleTimeout time.Duration) *Conn {
	c := &Conn{
		nc: nc, peer: nc.RemoteAddr().String(), frameTimeout: frameTimeout, idleTimeout: idleTimeout,
		outputs: map[uint64]*Output{}, inputs: map[uint64]*Input{}, grant: map[uint64]int{},
		done: make(chan struct{}), wake: make(chan struct{}, 1), holdFor: corkDelay,
	}
	c.uncork = time.AfterFunc(time.Hour, func() {
		c.mu.Lock()
		c.armed, c.due = false, true
		c.mu.Unlock()
		signal(c.wake)
	})
	c.uncork.Stop()
	c.queue = append(c.queue, appendHello(nil))
	if _, err := finish(c.queue[0]); err != nil {
		panic(err)
	}
	c.wg.Go(c.read)
	c.wg.Go(c.write)
	signal(c.wake)
	return c
}

// Done is closed when the connection has failed or closed; Err says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is the connection's error, nil while it works.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection and waits for its goroutines. Frames not yet
// written are dropped.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	c.wg.Wait()
	return nil
}

// fail records the connection's first error and closes it.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	if !errors.Is(err, ErrClosed) {
		err = fmt.Errorf("transport: connection with %s: %w", c.peer, err)
	}
	c.err = err
	close(c.done)
	c.nc.Close()
	c.uncork.Stop()
}

// hold reports whether what is queued, with the frame of n bytes (n = 0: a
// credit) just queued, may wait for more (see corkBytes), and if it may,
// holds it for at most corkDelay. c.mu is held; if hold returns false,
// the caller sets due and wakes the writer.
func (c *Conn) hold(n int) bool {
	c.corked += n
	if c.corked >= corkBytes {
		return false
	}
	c.held = true
	if !c.armed {
		c.armed = true
		c.uncork.Reset(c.holdFor)
	}
	return true
}

// Output opens the sending side of channel ch. The peer opens its Input
// with the same number and codec.
func (c *Conn) Output(ch uint64, bc BatchCodec) (*Output, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.output(ch)
	if err != nil {
		return nil, err
	}
	if o.codec != nil {
		return nil, fmt.Errorf("transport: channel %d is already open for sending", ch)
	}
	o.codec = bc
	return o, nil
}

// output returns channel ch's sending side, made when either a credit or
// Output names it first; c.mu is held.
func (c *Conn) output(ch uint64) (*Output, error) {
	if o, ok := c.outputs[ch]; ok {
		return o, nil
	}
	if len(c.outputs) >= maxChannels {
		return nil, protocolErr("more than %d channels", maxChannels)
	}
	o := &Output{c: c, ch: ch, granted: make(chan struct{}, 1)}
	c.outputs[ch] = o
	return o, nil
}

// Input opens the receiving side of channel ch, buffering up to capacity
// events (1..65536) and signalling ready when one arrives.
func (c *Conn) Input(ch uint64, bc BatchCodec, capacity int, ready chan<- struct{}) (*Input, error) {
	if capacity < 1 || capacity > maxCredits {
		return nil, fmt.Errorf("transport: channel capacity %d outside 1..%d", capacity, maxCredits)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.inputs[ch]; ok {
		return nil, fmt.Errorf("transport: channel %d is already open for receiving", ch)
	}
	if len(c.inputs) >= maxChannels {
		return nil, fmt.Errorf("transport: more than %d channels", maxChannels)
	}
	// Batches in use are at most those queued (capacity, and a tail) and
	// the one the task handles: so many spares are never dropped.
	in := &Input{c: c, ch: ch, codec: bc, capacity: capacity, q: runtime.NewQueue(capacity), ready: ready,
		spares: runtime.NewBatchPool(capacity + 2)}
	c.inputs[ch] = in
	c.grant[ch] += capacity
	c.due = true
	signal(c.wake)
	return in, nil
}

// write sends queued frames and granted credits, coalescing what piled up
// while it wrote, and a keep-alive when it wrote nothing for a quarter of
// the idle timeout. NB: a write has no deadline. On a cut, the reader finds
// the peer silent and fails the connection, which ends the write; a
// deadline on writes would fail a slow link that is moving (the kernel
// wakes a blocked writer only once half of what it queued has drained:
// an outside review saw a 1.6 MB/s link fail a 500 ms deadline).
func (c *Conn) write() {
	w := bufio.NewWriterSize(c.nc, 64<<10)
	var credit []byte
	quiet := time.NewTimer(c.idleTimeout / 4)
	defer quiet.Stop()
	for {
		keepAlive := false
		select {
		case <-c.wake:
		case <-quiet.C:
			keepAlive = true
		case <-c.done:
			return
		}
		c.mu.Lock()
		if c.held && !c.due {
			c.mu.Unlock()
			continue // until something is due
		}
		frames := c.queue
		c.queue = nil
		c.corked, c.held, c.due = 0, false, false
		if c.armed {
			c.armed = false
			c.uncork.Stop()
		}
		credit = credit[:0]
		for ch, n := range c.grant {
			start := len(credit)
			credit = appendCredit(credit, ch, n)
			finish(credit[start:])
		}
		clear(c.grant)
		c.mu.Unlock()
		if keepAlive && len(frames) == 0 && len(credit) == 0 {
			credit = appendKeepAlive(credit)
			finish(credit)
		}
		if len(frames) == 0 && len(credit) == 0 {
			continue
		}
		for _, f := range frames {
			w.Write(f)
		}
		w.Write(credit)
		if err := w.Flush(); err != nil {
			c.fail(err)
			return
		}
		c.recycle(frames)
		quiet.Reset(c.idleTimeout / 4)
	}
}

// frameBuf returns an empty buffer to encode a frame into, of at least
// size bytes if it is new.
func (c *Conn) frameBuf(size int) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.free); n > 0 {
		f := c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
		c.freeBytes -= cap(f)
		return f[:0]
	}
	return make([]byte, 0, size)
}

// recycle keeps frames written for frameBuf.
func (c *Conn) recycle(frames [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range frames {
		if len(c.free) < maxFree && cap(f) <= maxFreeFrameBytes && c.freeBytes+cap(f) <= maxFreeBytes {
			c.free = append(c.free, f)
			c.freeBytes += cap(f)
		}
	}
}

// read dispatches the peer's frames until the connection fails. It never
// waits for a task: credits bound what it buffers.
func (c *Conn) read() {
	in := &silenceReader{nc: c.nc, silence: c.frameTimeout, until: time.Now().Add(c.frameTimeout)}
	fr := &frameReader{r: bufio.NewReaderSize(in, 64<<10)}
	f, err := fr.next()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("%w: the peer did not greet within %v", ErrFrameStalled, c.frameTimeout)
	case errors.Is(err, ErrProtocol):
		err = protocolErr("the peer did not greet as a Weir process (%v)", err)
	case err == nil:
		err = checkHello(f)
	}
	in.silence = c.idleTimeout
	for err == nil {
		if f, err = c.readNext(fr, in); err == nil {
			err = c.dispatch(f)
		}
	}
	c.fail(err)
}

// silenceReader reads the connection with a deadline set at each read that
// waits for the network: the peer's silence bound, and no later than until
// if set. (A stale deadline never matters: every read gets a fresh one.)
type silenceReader struct {
	nc      net.Conn
	silence time.Duration
	until   time.Time
}

func (s *silenceReader) Read(p []byte) (int, error) {
	d := time.Now().Add(s.silence)
	if !s.until.IsZero() && s.until.Before(d) {
		d = s.until
	}
	s.nc.SetReadDeadline(d)
	return s.nc.Read(p)
}

// readNext reads the next frame: its first byte within idleTimeout of the
// last, then the rest within frameTimeout, and with no silence of
// idleTimeout half-way through (a cut network mid-frame is a silent peer:
// the keep-alives cannot pass a frame begun).
func (c *Conn) readNext(fr *frameReader, in *silenceReader) (frame, error) {
	fr.release()
	in.until = time.Time{}
	if _, err := fr.r.Peek(1); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("%w: it sent nothing, not even a keep-alive, for %v", ErrPeerSilent, c.idleTimeout)
		}
		return frame{}, err
	}
	in.until = time.Now().Add(c.frameTimeout)
	f, err := fr.next()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if time.Now().Before(in.until) {
			err = fmt.Errorf("%w: it stopped half-way through a frame, and sent nothing for %v", ErrPeerSilent, c.idleTimeout)
		} else {
			err = fmt.Errorf("%w: the rest of a frame did not arrive within %v of its start", ErrFrameStalled, c.frameTimeout)
		}
	}
	return f, err
}

func (c *Conn) dispatch(f frame) error {
	switch f.typ {
	case typeCredit:
		n, err := decodeCredit(f.payload)
		if err != nil {
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		o, err := c.output(f.channel)
		if err != nil {
			return err
		}
		if o.credits+n > maxCredits {
			return protocolErr("channel %d: more than %d credits", f.channel, maxCredits)
		}
		o.credits += n
		if !o.opened {
			// The frames forced or overtaking before the receiver opened
			// the channel go first, ahead of what these credits send.
			o.opened = true
			c.queue = append(c.queue, o.early...)
			o.early = nil
			c.due = true
			signal(c.wake)
		}
		signal(o.granted)
		return nil
	case typeEvent, typeForced:
		c.mu.Lock()
		in := c.inputs[f.channel]
		c.mu.Unlock()
		if in == nil {
			return protocolErr("an event on channel %d, which was granted no credit", f.channel)
		}
		in.bytes.Add(int64(f.size))
		spare, _ := in.spares.Take()
		e, tail, err := decodeEvent(f.payload, in.codec, spare)
		if err != nil {
			return fmt.Errorf("channel %d: %w", f.channel, err)
		}
		if spare.Batch != nil && e.Kind != runtime.KindBatch && tail.Kind != runtime.KindBatch {
			in.spares.Put(spare) // unused: keep it for the next batch
		}
		if f.typ == typeForced {
			if e.Priority {
				return protocolErr("channel %d: a forced %v marked overtaking", f.channel, e)
			}
			return in.putForced(e)
		}
		return in.put(e, tail)
	case typeKeepAlive:
		if f.channel != 0 || len(f.payload) != 0 {
			return protocolErr("a keep-alive on channel %d with %d bytes: it has neither", f.channel, len(f.payload))
		}
		return nil
	case typeHello:
		return protocolErr("a second hello")
	}
	return protocolErr("unknown frame type %d", f.typ)
}

// Output is the sending side of a channel; it implements
// runtime.OutputChannel. One goroutine pushes (and overtakes).
type Output struct {
	c       *Conn
	ch      uint64
	codec   BatchCodec
	credits int           // guarded by c.mu
	granted chan struct{} // signalled when credits arrive
	// opened: the receiver has opened the channel (its first credits
	// came); early holds the frames sent without a credit before then,
	// which the receiver could not take yet. Both guarded by c.mu.
	opened   bool
	early    [][]byte
	sizeHint int // the last frame's size
	// spare is the last batch sent: encoded, so the pushing task may fill
	// it again.
	spare runtime.Event
	// bytes counts the frames of its events, as queued (Bytes).
	bytes atomic.Int64
}

// Bytes implements runtime.ByteCounter: the bytes of the frames of the
// events sent (queued for the connection's writer) so far, headers
// included.
func (o *Output) Bytes() int64 { return o.bytes.Load() }

// Spare returns the last batch sent, if any, for the task to fill again.
func (o *Output) Spare() (runtime.Event, bool) {
	e := o.spare
	o.spare = runtime.Event{}
	return e, e.Batch != nil
}

// Push sends e once the receiver has granted room for it, waiting until
// then or until ctx ends or the connection fails.
func (o *Output) Push(ctx context.Context, e runtime.Event) error {
	c := o.c
	for {
		if ok, err := o.TryPush(e); ok || err != nil {
			return err
		}
		o.Flush() // what is queued must reach the receiver to free room
		select {
		case <-o.granted:
		case <-c.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// TryPush sends e if the receiver has granted room for it. Its error is
// the connection's, once it failed.
func (o *Output) TryPush(e runtime.Event) (bool, error) {
	c := o.c
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return false, c.err
	}
	if o.credits == 0 {
		c.mu.Unlock()
		return false, nil
	}
	o.credits--
	c.mu.Unlock()
	return true, o.send(e)
}

// Overtake sends barrier b of an unaligned checkpoint, and tail if it is a
// batch, in one frame, without a credit: it passes a full window. The
// frames queued before it still reach the receiver first, which queues b
// ahead of them (runtime.Queue.Overtake). The tail is then the spare. Its
// error is the connection's, once it failed.
func (o *Output) Overtake(b, tail runtime.Event) error {
	c := o.c
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return o.queue(appendOvertake(o.c.frameBuf(o.sizeHint), o.ch, b, tail, o.codec), MaxFrameBytes, tail, false)
}

// ForcePush sends e without a credit: the receiver queues it beyond its
// window (runtime.OutputChannel.ForcePush). Its error is the connection's,
// once it failed.
func (o *Output) ForcePush(e runtime.Event) error {
	c := o.c
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return o.queue(appendEvent(o.c.frameBuf(o.sizeHint), typeForced, o.ch, e, o.codec), maxEventFrameBytes, e, false)
}

// Room is signalled when credits arrive.
func (o *Output) Room() <-chan struct{} { return o.granted }

// HasRoom reports whether the receiver granted room for an event.
func (o *Output) HasRoom() bool {
	c := o.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return o.credits > 0 || c.err != nil
}

// send encodes e and queues it for the connection's writer; its credit is
// taken. A batch's frame may wait for more (corking), any other event's
// goes at once.
func (o *Output) send(e runtime.Event) error {
	return o.queue(appendEvent(o.c.frameBuf(o.sizeHint), typeEvent, o.ch, e, o.codec), maxEventFrameBytes, e, e.Kind == runtime.KindBatch)
}

// Flush wakes the connection's writer for the frames queued
// (runtime.Flusher): its task goes idle, or waits for room.
func (o *Output) Flush() {
	c := o.c
	c.mu.Lock()
	held := c.held && !c.due
	if held {
		c.due = true
	}
	c.mu.Unlock()
	if held {
		signal(c.wake)
	}
}

// queue finishes frame f (of at most limit bytes) and queues it for the
// connection's writer, which it wakes unless the frame may wait for more
// (mayHold, and see corkBytes). If batch is one, f holds its encoding: the
// task may fill it again (Spare).
func (o *Output) queue(f []byte, limit int, batch runtime.Event, mayHold bool) error {
	c := o.c
	f, err := finishWithin(f, limit)
	o.sizeHint = len(f) + len(f)/8
	if err != nil {
		return err // NB: a credit taken is lost with the connection's owner failing the job
	}
	o.bytes.Add(int64(len(f)))
	if batch.Kind == runtime.KindBatch {
		o.spare = batch
	}
	c.mu.Lock()
	if !o.opened {
		// Sent without a credit (forced, or an overtaking barrier) to a
		// receiver that has not opened the channel yet, as a peer
		// deploying the attempt's tasks later than this one: it would
		// find no channel for the frame. It waits for the channel's
		// first credits.
		o.early = append(o.early, f)
		c.mu.Unlock()
		return nil
	}
	wake := c.enqueue(f, mayHold)
	c.mu.Unlock()
	if wake {
		signal(c.wake)
	}
	return nil
}

// enqueue queues frame f for the writer, and reports whether to wake it:
// unless f may wait for more (mayHold, and see hold). c.mu is held.
func (c *Conn) enqueue(f []byte, mayHold bool) bool {
	c.queue = append(c.queue, f)
	if mayHold && c.hold(len(f)) {
		return false
	}
	c.due = true
	return true
}

// Input is the receiving side of a channel; it implements
// runtime.InputChannel. One task pops.
type Input struct {
	c        *Conn
	ch       uint64
	codec    BatchCodec
	capacity int // the credits granted at open
	ready    chan<- struct{}

	mu sync.Mutex
	q  runtime.Queue
	// withhold is how many of its capacity's credits the task's debloater
	// keeps from the sender (SetCapacity); withheld, how many it has
	// kept so far, by not granting back the room of events taken.
	withhold, withheld int
	// spares holds batches the task has handled, for the connection's
	// reader to decode the next ones into (as many as can be in use).
	spares runtime.BatchPool
	// bytes counts the frames of its events received (Bytes).
	bytes atomic.Int64
}

// Bytes implements runtime.ByteCounter: the bytes of the frames of the
// events received so far, headers included.
func (in *Input) Bytes() int64 { return in.bytes.Load() }

// Recycle takes a batch the task has handled and no longer holds.
func (in *Input) Recycle(e runtime.Event) { in.spares.Put(e) }

// put queues an event the peer sent: with a credit, or an overtaking
// barrier (e.Priority) and its tail (if a batch).
func (in *Input) put(e, tail runtime.Event) error {
	in.mu.Lock()
	switch {
	case !e.Priority && in.q.Full():
		in.mu.Unlock()
		return protocolErr("channel %d: an event beyond the %d granted", in.ch, in.capacity)
	case !e.Priority:
		in.q.Push(e)
	case in.q.PriorityLen() >= maxOvertaking:
		in.mu.Unlock()
		return protocolErr("channel %d: more than %d overtaking barriers or forced events queued", in.ch, maxOvertaking)
	default:
		in.q.Overtake(e, tail)
	}
	in.mu.Unlock()
	signal(in.ready)
	return nil
}

// putForced queues an event the peer forced (ForcePush): beyond the
// window, bounded as overtaking barriers are.
func (in *Input) putForced(e runtime.Event) error {
	in.mu.Lock()
	if in.q.PriorityLen() >= maxOvertaking {
		in.mu.Unlock()
		return protocolErr("channel %d: more than %d overtaking barriers or forced events queued", in.ch, maxOvertaking)
	}
	in.q.PushPriority(e)
	in.mu.Unlock()
	signal(in.ready)
	return nil
}

// TryPop takes the oldest event, if any, and grants its room back to the
// sender, unless it came without a credit (an overtaking barrier or its
// tail: Priority).
func (in *Input) TryPop() (runtime.Event, bool) { return in.pop((*runtime.Queue).Pop) }

// TryPopControl takes the oldest event if it is a barrier or a cancel
// marker, and grants its room back as TryPop does.
func (in *Input) TryPopControl() (runtime.Event, bool) {
	return in.pop((*runtime.Queue).PopControl)
}

func (in *Input) pop(take func(*runtime.Queue) (runtime.Event, bool)) (runtime.Event, bool) {
	in.mu.Lock()
	e, ok := take(&in.q)
	keep := ok && !e.Priority && in.withheld < in.withhold
	if keep {
		in.withheld++
	}
	batch := max((in.capacity-in.withhold)/4, 1) // a quarter of the window
	in.mu.Unlock()
	if ok && !e.Priority && !keep {
		in.grant(1, batch)
	}
	return e, ok
}

// SetCapacity implements runtime.Resizable: the sender may send at most n
// events ahead of the task (n between 1 and the capacity the channel was
// opened with). Shrinking, the receiver withholds the credits of the next
// events its task takes; growing, it grants those it withheld at once.
func (in *Input) SetCapacity(n int) {
	in.mu.Lock()
	was := in.withhold
	in.withhold = in.capacity - min(max(n, 1), in.capacity)
	give := max(in.withheld-in.withhold, 0)
	in.withheld -= give
	shrunk := in.withhold > was
	in.mu.Unlock()
	if give > 0 || shrunk {
		// Shrunk, it sends the credits held (corking) at once: the next
		// events' it withholds, and its pop may grant nothing more.
		in.grant(give, 0)
	}
}

// grant gives the sender n credits with the connection's next write, which
// may wait for more (corking) while the channel's credits due are fewer
// than batch.
func (in *Input) grant(n, batch int) {
	c := in.c
	c.mu.Lock()
	if n > 0 { // a credit of 0 is a protocol violation
		c.grant[in.ch] += n
	}
	wake := c.grant[in.ch] >= batch || !c.hold(0)
	if wake {
		c.due = true
	}
	c.mu.Unlock()
	if wake {
		signal(c.wake)
	}
}

// Overtaken appends to dst the first k queued batches: those the barrier
// just taken overtook (Event.Overtaken). They stay queued.
// Promote lets barriers triggered at deadline or earlier overtake
// (runtime.Queue.Promote); they keep their credits.
func (in *Input) Promote(deadline int64) {
	in.mu.Lock()
	in.q.Promote(deadline)
	in.mu.Unlock()
}

func (in *Input) Overtaken(k int, dst []runtime.Event) []runtime.Event {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.q.Batches(k, dst)
}

func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
