package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
)

var (
	// ErrOtherGraph refuses a worker that built another job graph.
	ErrOtherGraph = errors.New("cluster: another job graph")
	// ErrSessionEnded answers a heartbeat of a session the coordinator no
	// longer knows: the worker was declared lost, or registered again, or
	// the coordinator restarted.
	ErrSessionEnded = errors.New("cluster: session ended; register again")
	// ErrNameHeld refuses a registration under a name that a live session
	// holds (see NameHeldError).
	ErrNameHeld = errors.New("cluster: the worker name is held by a live session")
)

// NameHeldError is the refusal of a registration under a name that a
// session not yet timed out holds.
type NameHeldError struct {
	Held Worker
	// Last is the held session's last heartbeat or registration.
	Last time.Time
}

func (e *NameHeldError) Error() string {
	return fmt.Sprintf("cluster: worker name %q is held by session %d (last heartbeat at %s)", clip(e.Held.Name), e.Held.Session, e.Last.Format(time.RFC3339Nano))
}

func (e *NameHeldError) Is(target error) bool { return target == ErrNameHeld }

// Worker is a registered worker process.
type Worker struct {
	Name  string
	Slots int
	// DataAddress is where it accepts data connections.
	DataAddress string
	// Session numbers its registration.
	Session uint64
}

// Members is the coordinator's view of its workers. It reads no clock:
// the driver passes the time in. Not safe for concurrent use.
type Members struct {
	graph   Graph
	timeout time.Duration
	epoch   uint64
	session uint64
	workers map[string]*member
	// cuts are the pairs of workers whose data connection failed while
	// both went on answering heartbeats (a data path cut between them),
	// and until when placements keep them apart.
	cuts map[[2]string]time.Time
}

type member struct {
	Worker
	last time.Time // the last heartbeat (or registration)
	// suspect: a call to the worker or a peer's data connection to it
	// failed since; it gets no tasks until it answers again.
	suspect bool
	// process is what its last heartbeat said of its process; nil
	// before one said it.
	process *clusterpb.ProcessStats
	// copies are the local copies of the job's subtasks' state it holds,
	// as of which checkpoint (its last registration or heartbeat said).
	copies map[checkpoint.TaskID]checkpoint.ID
}

// NewMembers returns an empty membership for job graph g, declaring a
// worker lost after timeout without a heartbeat. Its sessions are numbered
// from epoch << sessionBits on: a coordinator of a later term (a larger
// epoch) numbers every session above every earlier term's, so that a
// worker refuses the commands of a deposed coordinator (node.Deploy: the
// session must be the worker's).
func NewMembers(g Graph, timeout time.Duration, epoch uint64) *Members {
	return &Members{graph: g, timeout: timeout, epoch: epoch, session: epoch << sessionBits, workers: map[string]*member{}, cuts: map[[2]string]time.Time{}}
}

// sessionBits: a term numbers at most 1<<sessionBits sessions (Register
// refuses more), and epochs (etcd revisions) below 1<<(64-sessionBits).
const sessionBits = 24

// Register adds worker w, built with graph g, under a new session. A name
// that a session holds is refused with a *NameHeldError, unless that
// session has timed out (Expire has not removed it yet): that one is
// replaced and returned as lost, as its process died or lost its session
// and its tasks are gone. The driver decides whether a held session is
// dead (End) before its timeout.
func (m *Members) Register(w Worker, g Graph, now time.Time) (Worker, *Worker, error) {
	if len(w.Name) > maxNameBytes {
		return Worker{}, nil, errNameTooLong(w.Name)
	}
	if d := m.graph.Diff(g); d != nil {
		return Worker{}, nil, diffError(w.Name, d)
	}
	if w.Slots < 1 {
		return Worker{}, nil, fmt.Errorf("cluster: worker %q offers %d slots; it needs at least 1", w.Name, w.Slots)
	}
	if m.epoch != 0 && (m.session+1)&(1<<sessionBits-1) == 0 {
		// NB: without high availability (epoch 0) sessions are not
		// bounded: no later term numbers above them.
		return Worker{}, nil, fmt.Errorf("cluster: this coordinator registered %d sessions, the most one term of leadership may; restart it (a standby takes over, and numbers its own)", 1<<sessionBits-1)
	}
	var replaced *Worker
	if old, ok := m.workers[w.Name]; ok {
		if now.Sub(old.last) < m.timeout {
			return Worker{}, nil, &NameHeldError{Held: old.Worker, Last: old.last}
		}
		replaced = &old.Worker
	}
	m.session++
	w.Session = m.session
	m.workers[w.Name] = &member{Worker: w, last: now}
	for pair := range m.cuts {
		if pair[0] == w.Name || pair[1] == w.Name {
			delete(m.cuts, pair) // a process of its own, on a path of its own
		}
	}
	return w, replaced, nil
}

// End ends worker name's session if it is the given one, and returns it.
func (m *Members) End(name string, session uint64) (Worker, bool) {
	w, ok := m.workers[name]
	if !ok || w.Session != session {
		return Worker{}, false
	}
	delete(m.workers, name)
	return w.Worker, true
}

// Held returns the member holding name, and its last heartbeat.
func (m *Members) Held(name string) (Worker, time.Time, bool) {
	w, ok := m.workers[name]
	if !ok {
		return Worker{}, time.Time{}, false
	}
	return w.Worker, w.last, true
}

// Heartbeat records that the worker's session is alive at now.
func (m *Members) Heartbeat(name string, session uint64, now time.Time) error {
	w, ok := m.workers[name]
	if !ok || w.Session != session {
		return fmt.Errorf("%w (worker %q, session %d)", ErrSessionEnded, clip(name), session)
	}
	w.last = now
	w.suspect = false
	return nil
}

// SetProcess keeps p as what worker name's session last said of its
// process (a heartbeat's); another session's is ignored.
func (m *Members) SetProcess(name string, session uint64, p *clusterpb.ProcessStats) {
	if w, ok := m.workers[name]; ok && w.Session == session && p != nil {
		w.process = p
	}
}

// SetCopies keeps cs as the local copies worker name's session holds (a
// registration's or heartbeat's): those of the job, at most maxCopies.
// Another session's are ignored.
func (m *Members) SetCopies(name string, session uint64, cs []*clusterpb.LocalCopy) {
	w, ok := m.workers[name]
	if !ok || w.Session != session {
		return
	}
	w.copies = map[checkpoint.TaskID]checkpoint.ID{}
	for _, c := range cs[:min(len(cs), maxCopies)] {
		if c.GetJob() == m.graph.Job {
			w.copies[taskFromProto(c.GetTask())] = checkpoint.ID(c.GetCheckpoint())
		}
	}
}

// Copies returns, of each subtask, the workers that hold a local copy
// of its state as of checkpoint id, by name.
func (m *Members) Copies(id checkpoint.ID) Copies {
	cs := Copies{}
	for _, w := range m.workers {
		for task, at := range w.copies {
			if at == id {
				cs[task] = append(cs[task], w.Name)
			}
		}
	}
	for _, names := range cs {
		slices.Sort(names)
	}
	return cs
}

// Suspected reports whether the worker is suspect.
func (m *Members) Suspected(name string) bool {
	w, ok := m.workers[name]
	return ok && w.suspect
}

// Suspect marks the worker's session as failing (a call to it, or a data
// connection to it, failed): it gets no tasks until its next heartbeat or
// registration, so a worker that died is not given the next attempt's
// tasks while its timeout runs. A live one clears it within a heartbeat
// interval. It reports whether the session was live.
func (m *Members) Suspect(name string, session uint64) bool {
	w, ok := m.workers[name]
	if !ok || w.Session != session {
		return false
	}
	w.suspect = true
	return true
}

// Expire removes and returns the workers whose last heartbeat is timeout or
// more before now, by name.
func (m *Members) Expire(now time.Time) []Worker {
	var lost []Worker
	for name, w := range m.workers {
		if now.Sub(w.last) >= m.timeout {
			lost = append(lost, w.Worker)
			delete(m.workers, name)
		}
	}
	slices.SortFunc(lost, func(a, b Worker) int { return strings.Compare(a.Name, b.Name) })
	return lost
}

// Workers returns the live workers that are not suspect, by name, and
// their slots in all.
func (m *Members) Workers() ([]Worker, int) {
	var ws []Worker
	slots := 0
	for _, w := range m.workers {
		if w.suspect {
			continue
		}
		ws = append(ws, w.Worker)
		slots += w.Slots
	}
	slices.SortFunc(ws, func(a, b Worker) int { return strings.Compare(a.Name, b.Name) })
	return ws, slots
}

// Registered returns every worker whose session holds, suspect or not.
func (m *Members) Registered() []Worker {
	ws := make([]Worker, 0, len(m.workers))
	for _, w := range m.workers {
		ws = append(ws, w.Worker)
	}
	return ws
}

// Cut records at now that the data connection between workers a and b
// failed: for cutTimeouts heartbeat timeouts, Placeable keeps them apart.
// NB: a worker that cannot reach another while both reach the coordinator
// answers every heartbeat, so Suspect, which a heartbeat clears, would put
// the next attempt on both again, to fail again. After that, an attempt
// may try the pair again: a cut heals without telling anyone.
func (m *Members) Cut(a, b string, now time.Time) {
	if a == b {
		return
	}
	pair := [2]string{min(a, b), max(a, b)}
	if until := now.Add(cutTimeouts * m.timeout); until.After(m.cuts[pair]) {
		m.cuts[pair] = until
	}
}

// cutTimeouts: see Cut.
const cutTimeouts = 10

// Placeable returns the workers an attempt may be placed on at now, by
// name, and their slots in all: the live ones that are not suspect, less
// enough of them that no two left were cut apart before now. It drops the
// worker in the most such pairs first (one cut off from all others goes,
// not all others), the one whose name sorts last among equals.
func (m *Members) Placeable(now time.Time) ([]Worker, int) {
	ws, slots := m.Workers()
	for pair, until := range m.cuts {
		if !now.Before(until) {
			delete(m.cuts, pair)
		}
	}
	for {
		degree := map[string]int{}
		for pair := range m.cuts {
			a := slices.ContainsFunc(ws, func(w Worker) bool { return w.Name == pair[0] })
			b := slices.ContainsFunc(ws, func(w Worker) bool { return w.Name == pair[1] })
			if a && b {
				degree[pair[0]]++
				degree[pair[1]]++
			}
		}
		if len(degree) == 0 {
			return ws, slots
		}
		drop := -1
		for i, w := range ws {
			if d := degree[w.Name]; d > 0 && (drop < 0 || d >= degree[ws[drop].Name]) {
				drop = i // NB: ws is sorted by name: the last of the most cut
			}
		}
		slots -= ws[drop].Slots
		ws = slices.Delete(ws, drop, drop+1)
	}
}

// NextCutEnd returns when the first cut still in force at now ends.
func (m *Members) NextCutEnd(now time.Time) (time.Time, bool) {
	var first time.Time
	for _, until := range m.cuts {
		if now.Before(until) && (first.IsZero() || until.Before(first)) {
			first = until
		}
	}
	return first, !first.IsZero()
}

// Member is a worker as the membership sees it.
type Member struct {
	Worker
	// Suspect: see Suspect. Last is its last heartbeat or registration.
	Suspect bool
	Last    time.Time
	// Process is what its last heartbeat said of its process (nil: none
	// said it yet). NB: shared, not copied: read it only.
	Process *clusterpb.ProcessStats
}

// All returns every registered worker, suspect or not, by name.
func (m *Members) All() []Member {
	var ms []Member
	for _, w := range m.workers {
		ms = append(ms, Member{Worker: w.Worker, Suspect: w.suspect, Last: w.last, Process: w.process})
	}
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return ms
}
