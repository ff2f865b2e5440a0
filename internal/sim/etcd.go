package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// attemptBits: with high availability, attempts are numbered from
// epoch<<attemptBits up, as the cluster numbers worker sessions and wire
// attempts (internal/cluster, sessionBits), so that every attempt of a
// term is above every attempt of the terms before it.
const attemptBits = 24

// errDeposed is etcd's answer to a write of a leader whose term ended
// (ha.ErrDeposed; storage.Led wraps it in ErrLeaseLost).
var errDeposed = errors.New("deposed: the leader key's revision is another term's")

// errIDUsed is etcd's answer to a reservation of an id at or below the
// counter (ha.ErrIDUsed).
var errIDUsed = errors.New("checkpoint id used")

// errUnknownOutcome: etcd applied a record, but its answer was lost; the
// driver counts the commit as failed (storage.ErrUnavailable) and forgets
// the record when it discards the checkpoint.
var errUnknownOutcome = errors.New("etcd's answer was lost")

// etcd models what a job's coordinators keep in etcd (internal/ha): the
// leader key, whose create revision is the term's epoch; the checkpoint-id
// counter; the records of completed checkpoints. Every write is a
// transaction guarded by the writer's epoch: only the current leader's
// take effect. It is pure: the simulation calls it in its own steps.
type etcd struct {
	rev    uint64 // etcd's revision: every write moves it on
	leader uint64 // the current leader key's create revision: the epoch
	lastID checkpoint.ID
	// completed holds the records: checkpoint → the epoch that recorded
	// it. recordedBy keeps every record ever made, forgotten or not, for
	// the invariants.
	completed, recordedBy map[checkpoint.ID]uint64
	// completeDeposed plants the bug: Complete is not fenced.
	completeDeposed bool
}

func newEtcd(completeDeposed bool) *etcd {
	return &etcd{completed: map[checkpoint.ID]uint64{}, recordedBy: map[checkpoint.ID]uint64{}, completeDeposed: completeDeposed}
}

// campaign puts a new leader key: its revision is the new term's epoch,
// and the previous term has ended (its lease lapsed).
func (e *etcd) campaign() uint64 {
	e.rev++
	e.leader = e.rev
	return e.leader
}

func (e *etcd) fence(epoch uint64) error {
	if epoch != e.leader {
		return fmt.Errorf("%w (epoch %d; epoch %d leads)", errDeposed, epoch, e.leader)
	}
	return nil
}

// reserve moves the checkpoint-id counter to id (ha.Leadership.Reserve).
func (e *etcd) reserve(epoch uint64, id checkpoint.ID) error {
	if err := e.fence(epoch); err != nil {
		return err
	}
	if id <= e.lastID {
		return fmt.Errorf("%w: %d (the last is %d)", errIDUsed, id, e.lastID)
	}
	e.rev++
	e.lastID = id
	return nil
}

// complete records checkpoint id as completed (ha.Leadership.Complete):
// the commit point of a run with high availability.
func (e *etcd) complete(epoch uint64, id checkpoint.ID) error {
	if err := e.fence(epoch); err != nil && !e.completeDeposed {
		return err
	}
	e.rev++
	e.completed[id] = epoch
	e.recordedBy[id] = epoch
	return nil
}

// forget deletes the record of id (ha.Leadership.Forget).
func (e *etcd) forget(epoch uint64, id checkpoint.ID) error {
	if err := e.fence(epoch); err != nil {
		return err
	}
	if _, ok := e.completed[id]; ok {
		e.rev++
		delete(e.completed, id)
	}
	return nil
}

// leader is one coordinator instance and the deployments it runs. Without
// high availability there is one at a time, and a process crash replaces
// it; with it, each is one term of the job's leadership, and a deposed one
// may act on beside its successor until it notices its loss.
type leader struct {
	epoch    uint64 // its leader key's revision; 0 without high availability
	coord    Coordinator
	attempts int    // deployments so far
	attempt  uint64 // the deployment in force: epoch<<attemptBits | attempts
	tasks    []*task
	on       []int // the worker of each task of the deployment, by index in taskIDs
	// links are the workers' links to this coordinator, FIFO each way;
	// local holds its own messages (metadata writes' outcomes).
	links    [][]msg
	local    []msg
	persistQ []write
	// zombies are tasks of its previous deployment that run on after a
	// failover until zombieUntil, when their cancellation lands (a slow
	// worker). Messages to and from them carry their attempt; the
	// coordinator addresses only the current attempt's tasks.
	zombies      []*task
	zombieUntil  time.Time
	maxTriggered checkpoint.ID
	savepoints   map[checkpoint.ID]bool
	// mustAlign holds the savepoints and the checkpoints that can be the
	// final one (Trigger.Final), as the runtime's triggers say: they are
	// aligned in unaligned runs too.
	mustAlign map[checkpoint.ID]bool
	failover  bool
	// A model of the coordinator's failure counting: the failures that
	// count since the last completion or start, and the newest checkpoint
	// completed.
	counted int
	newest  checkpoint.ID
	// deposed: its term ended (the ground truth the invariants use, set
	// by the simulation, not by etcd). It acts on, unaware, until step
	// until, a fenced commit (storage.ErrLeaseLost ends the run for good)
	// or a job failure (a restart finds the term lost); then it is gone.
	deposed, leaseLost, gone bool
	until                    int
}
