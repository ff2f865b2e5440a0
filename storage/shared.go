package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gocloud.dev/gcerrors"

	"github.com/weirstream/weir/checkpoint"
)

// SharedDir is where shared files live, under the job's directory: files
// an incremental state backend wrote once and several checkpoints
// reference.
const SharedDir = "shared"

// IsShared reports whether h points at a shared file.
func IsShared(h checkpoint.Handle) bool { return strings.HasPrefix(h.Path, SharedDir+"/") }

// sharedName is a new, unique path for a shared file of h written for
// checkpoint id: uploads are never overwritten, so a file a checkpoint
// references cannot change. The name starts with id and a dot (writtenFor
// reads it back), then random hex, then "-" and h.File if set. Files of
// older versions have no id: their names start with the hex.
func sharedName(id checkpoint.ID, h checkpoint.Handle) string {
	var b [12]byte
	rand.Read(b[:])
	name := strconv.FormatUint(uint64(id), 10) + "." + hex.EncodeToString(b[:])
	if h.File != "" {
		name += "-" + url.PathEscape(h.File)
	}
	return SharedDir + "/" + url.PathEscape(h.Operator) + "/" + name
}

// writtenFor is the checkpoint a shared file was written for, read from
// its name (sharedName); false for a name without one.
func writtenFor(p string) (checkpoint.ID, bool) {
	name := p[strings.LastIndexByte(p, '/')+1:]
	name, _, _ = strings.Cut(name, "-")
	digits, _, ok := strings.Cut(name, ".")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(digits, 10, 64)
	return checkpoint.ID(id), err == nil
}

// ErrSharedGone marks a commit refused because the checkpoint references
// a shared file that storage deleted, or will delete once the checkpoints
// it waits for settle, with no completed checkpoint referencing it: the
// checkpoint could not be restored. The checkpoint is aborted; the next
// is built on a checkpoint that still exists.
var ErrSharedGone = errors.New("the checkpoint references a shared file that was deleted: its task built it on a checkpoint discarded meanwhile")

// registry counts the references of completed checkpoints to shared
// files, and says which files may be deleted (as Flink's
// SharedStateRegistry). A file is deleted when no completed checkpoint
// references it and no checkpoint that was in flight when it lost its last
// reference is still in flight (one may reference it: a task reuses the
// files of the newest completed checkpoint it knows of). It is rebuilt
// from the completed checkpoints' metadata at every start; files a crash
// left without references are deleted then (RemoveOrphans).
type registry struct {
	mu       sync.Mutex
	refs     map[string]int             // path → references by completed checkpoints
	uses     map[checkpoint.ID][]string // completed checkpoint → its shared paths
	written  map[checkpoint.ID][]string // in flight: shared files written for it
	inFlight map[checkpoint.ID]bool     // reserved, neither committed nor discarded
	waiting  []deferral                 // files to delete once checkpoints settle
}

type deferral struct {
	paths []string
	until map[checkpoint.ID]bool // in flight when the files lost their last reference
}

func newRegistry() *registry {
	r := &registry{}
	r.reset(nil)
	return r
}

// reset rebuilds the counts from the completed checkpoints.
func (r *registry) reset(completed []*checkpoint.Metadata) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refs, r.uses = map[string]int{}, map[checkpoint.ID][]string{}
	r.written, r.inFlight, r.waiting = map[checkpoint.ID][]string{}, map[checkpoint.ID]bool{}, nil
	for _, m := range completed {
		r.add(m)
	}
}

func (r *registry) add(m *checkpoint.Metadata) {
	for _, t := range m.Tasks {
		for _, h := range t.Handles {
			if IsShared(h) {
				r.refs[h.Path]++
				r.uses[m.ID] = append(r.uses[m.ID], h.Path)
			}
		}
	}
}

func (r *registry) reserve(id checkpoint.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight[id] = true
}

// wrote records that path was written for checkpoint id, if this storage
// reserved it: a worker's never does (the coordinator's does, and commits
// and discards), and would record for ever.
func (r *registry) wrote(id checkpoint.ID, path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight[id] {
		r.written[id] = append(r.written[id], path)
	}
}

// committed counts m's references; it returns files that may now go.
func (r *registry) committed(m *checkpoint.Metadata) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.uses[m.ID]; !dup {
		r.add(m)
	}
	delete(r.written, m.ID)
	return r.settled(m.ID)
}

// discarded forgets checkpoint id, completed or not; it returns the files
// to delete now.
func (r *registry) discarded(id checkpoint.ID) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var orphans []string
	if paths, ok := r.uses[id]; ok {
		for _, p := range paths {
			if r.refs[p]--; r.refs[p] == 0 {
				delete(r.refs, p)
				orphans = append(orphans, p)
			}
		}
		delete(r.uses, id)
	}
	for _, p := range r.written[id] {
		if r.refs[p] == 0 {
			orphans = append(orphans, p)
		}
	}
	delete(r.written, id)
	ready := r.settled(id)
	if len(orphans) > 0 {
		until := map[checkpoint.ID]bool{}
		for f := range r.inFlight {
			until[f] = true
		}
		if len(until) == 0 {
			return append(ready, orphans...)
		}
		r.waiting = append(r.waiting, deferral{paths: orphans, until: until})
	}
	return ready
}

// settled marks id as no longer in flight and returns the deferred files
// whose wait is over and that are still unreferenced.
func (r *registry) settled(id checkpoint.ID) []string {
	delete(r.inFlight, id)
	var ready []string
	keep := r.waiting[:0]
	for _, d := range r.waiting {
		delete(d.until, id)
		if len(d.until) > 0 {
			keep = append(keep, d)
			continue
		}
		for _, p := range d.paths {
			if r.refs[p] == 0 {
				ready = append(ready, p)
			}
		}
	}
	r.waiting = keep
	return ready
}

// orphans are the paths of all that no checkpoint references or is
// writing.
func (r *registry) orphans(all []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	busy := map[string]bool{}
	for _, ps := range r.written {
		for _, p := range ps {
			busy[p] = true
		}
	}
	maps.Copy(busy, r.waitingPaths()) // deleted when their wait is over
	var out []string
	for _, p := range all {
		if r.refs[p] == 0 && !busy[p] {
			out = append(out, p)
		}
	}
	return out
}

// waitingPaths is the set of the files whose deletion waits for
// checkpoints in flight.
func (r *registry) waitingPaths() map[string]bool {
	out := map[string]bool{}
	for _, d := range r.waiting {
		for _, p := range d.paths {
			out[p] = true
		}
	}
	return out
}

// check returns an error wrapping ErrSharedGone, naming the files, if m
// references a shared file that was not written for m, that no completed
// checkpoint references and that is not waiting for checkpoints in
// flight: one deleted, or about to be. (A task reuses only the files of
// a completed checkpoint; the files a task wrote for m may be unknown
// here: a worker of a cluster wrote them.)
func (r *registry) check(m *checkpoint.Metadata) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var waiting map[string]bool
	var gone []string
	for _, t := range m.Tasks {
		for _, h := range t.Handles {
			if !IsShared(h) || r.refs[h.Path] > 0 {
				continue
			}
			if id, ok := writtenFor(h.Path); ok && id == m.ID {
				continue
			}
			if waiting == nil {
				waiting = r.waitingPaths()
			}
			if !waiting[h.Path] {
				gone = append(gone, fmt.Sprintf("%s (task %s)", h.Path, t.Task))
			}
		}
	}
	if len(gone) == 0 {
		return nil
	}
	return fmt.Errorf("checkpoint %d not committed: %w: %s", m.ID, ErrSharedGone, strings.Join(gone, ", "))
}

// unreferenced returns the shared paths of hs that no completed
// checkpoint references (to delete: state of a checkpoint that will not
// complete), and forgets them as written.
func (r *registry) unreferenced(hs []checkpoint.Handle) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	waiting := r.waitingPaths()
	var out []string
	for _, h := range hs {
		// NB: a file waiting for checkpoints in flight may be referenced
		// by one of them: it is deleted when they settle.
		// NB: a path that leaves shared/ ("shared/../chk-1/_metadata",
		// from a task's acknowledgement) is no shared file to delete.
		if IsShared(h) && checkpoint.ValidatePath(h.Path) == nil && r.refs[h.Path] == 0 && !waiting[h.Path] {
			out = append(out, h.Path)
		}
	}
	for id, ps := range r.written {
		r.written[id] = slices.DeleteFunc(ps, func(p string) bool { return slices.Contains(out, p) })
	}
	return out
}

func sharedErr(op string, h checkpoint.Handle, err error) error {
	return fmt.Errorf("%s shared %s (%s): %w", op, handleName(h), h.Path, err)
}

// writeGate keeps the writes of a checkpoint's files and its discard
// apart: a discard cancels the writes in flight, waits for them to return,
// and refuses new ones until it is done. NB: cancels, not only waits: a
// write to a store that stopped answering (a stalled S3 request, which no
// timeout of the SDK's ends) held the discard of its expired checkpoint,
// and with it the job's coordinator, for as long as the request hung.
type writeGate struct {
	mu         sync.Mutex
	writing    map[checkpoint.ID]*gateWrites // per checkpoint with files being written
	discarding map[checkpoint.ID]bool        // no file of theirs may be written
	done       sync.Cond                     // a write ended
}

// gateWrites are the writes in flight of one checkpoint, under one context.
type gateWrites struct {
	n      int
	ctx    context.Context
	cancel context.CancelFunc
}

func newWriteGate() *writeGate {
	g := &writeGate{writing: map[checkpoint.ID]*gateWrites{}, discarding: map[checkpoint.ID]bool{}}
	g.done.L = &g.mu
	return g
}

// write runs w as a write of checkpoint id, unless id is being discarded;
// w's context ends when a discard of id begins.
func (g *writeGate) write(id checkpoint.ID, w func(ctx context.Context) error) error {
	g.mu.Lock()
	if g.discarding[id] {
		g.mu.Unlock()
		return errors.New("the checkpoint is being discarded")
	}
	ws := g.writing[id]
	if ws == nil {
		ws = &gateWrites{}
		ws.ctx, ws.cancel = context.WithCancel(context.Background())
		g.writing[id] = ws
	}
	ws.n++
	g.mu.Unlock()
	err := w(ws.ctx)
	discarded := ws.ctx.Err() != nil // before the last write cancels it
	g.mu.Lock()
	if ws.n--; ws.n == 0 {
		ws.cancel()
		delete(g.writing, id)
	}
	g.done.Broadcast()
	g.mu.Unlock()
	if err != nil && discarded {
		return fmt.Errorf("the checkpoint is being discarded: %w", err)
	}
	return err
}

// discard cancels the writes of id in flight, waits until they returned,
// and refuses new writes until the function it returns is called.
func (g *writeGate) discard(id checkpoint.ID) (done func()) {
	g.mu.Lock()
	g.discarding[id] = true
	if ws := g.writing[id]; ws != nil {
		ws.cancel()
	}
	for g.writing[id] != nil {
		g.done.Wait()
	}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.discarding, id)
		g.mu.Unlock()
	}
}

// damaged marks err as damaged checkpoint state when what it failed to
// read does not exist.
func damaged(err error) error {
	if errors.Is(err, os.ErrNotExist) || gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("%w: %w", checkpoint.ErrStateDamaged, err)
	}
	return err
}
