package checkpoint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// model is a deliberately simple reference for the coordinator's
// bookkeeping: a status per id, acknowledgements per id, and the count of
// consecutive failures.
type model struct {
	status    map[ID]string // pending, persisting, completed, aborted
	acked     map[ID]map[TaskID]bool
	savepoint map[ID]bool
	failures  int
	maxID     ID
	latest    ID
	running   bool
}

func TestCoordinatorAgainstModel(t *testing.T) {
	tasks := Tasks{All: parseTasks(t, "a#0,a#1,b#0,c#0"), Sources: parseTasks(t, "a#0,a#1")}
	for seed := range uint64(500) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 2))
			cfg := Config{
				Interval:          time.Duration(1+rng.IntN(20)) * time.Millisecond,
				Timeout:           time.Duration(5+rng.IntN(60)) * time.Millisecond,
				MaxConcurrent:     1 + rng.IntN(3),
				TolerableFailures: rng.IntN(3),
				Retained:          1 + rng.IntN(3),
			}
			c, err := New(Job{Name: "job", Tasks: tasks, Operators: testOperators}, cfg, Restored{MaxID: ID(rng.IntN(5))})
			if err != nil {
				t.Fatal(err)
			}
			m := &model{status: map[ID]string{}, acked: map[ID]map[TaskID]bool{}, savepoint: map[ID]bool{}, maxID: c.LastID()}
			now := t0
			c.Start(now)
			m.running = true
			var persistQ []ID
			for step := 0; step < 400; step++ {
				var persistedNow ID // id whose successful Persisted is reported in this step
				switch r := rng.IntN(20); {
				case r < 5:
					now = now.Add(time.Duration(rng.IntN(6)) * time.Millisecond)
					c.Tick(now)
				case r < 12 && m.maxID > 0:
					id := ID(1 + rng.IntN(int(m.maxID)+1))
					task := tasks.All[rng.IntN(len(tasks.All))]
					got := c.Acknowledge(now, task, id, nil)
					want := AckUnknown
					switch m.status[id] {
					case "pending":
						want = AckOK
						if m.acked[id][task] {
							want = AckDuplicate
						}
					case "persisting", "completed":
						want = AckDuplicate
					case "aborted":
						want = AckDiscarded
					}
					if got != want {
						t.Fatalf("step %d: ack %s %d = %v, model says %v (status %q)", step, task, id, got, want, m.status[id])
					}
					if got == AckOK {
						m.acked[id][task] = true
					}
				case r < 13 && m.maxID > 0:
					id := ID(1 + rng.IntN(int(m.maxID)))
					c.Decline(tasks.All[rng.IntN(len(tasks.All))], id, errors.New("no"))
				case r < 16 && len(persistQ) > 0:
					// Results may come back in any order: the coordinator
					// must not depend on writes finishing in id order.
					i := rng.IntN(len(persistQ))
					id := persistQ[i]
					persistQ = slices.Delete(persistQ, i, i+1)
					var err error
					if rng.IntN(4) == 0 {
						err = errors.New("disk full")
					} else {
						persistedNow = id
					}
					c.Persisted(now, id, err)
				case r < 17 && m.running:
					c.TaskFailed(tasks.All[rng.IntN(len(tasks.All))], errors.New("crash"))
					m.running = false
				case r < 18 && !m.running:
					// The driver reports writes in flight before restarting.
					for _, id := range persistQ {
						c.Persisted(now, id, nil)
						m.settle(t, c.Ready(), id, &persistQ, cfg, tasks)
					}
					persistQ = nil
					c.Start(now)
					m.failures = 0
					m.running = true
				case r < 19 && m.running:
					if _, err := c.TriggerSavepoint(now); err != nil && !m.hasPendingSavepoint() {
						t.Fatalf("savepoint refused with none pending: %v", err)
					}
				}
				m.settle(t, c.Ready(), persistedNow, &persistQ, cfg, tasks)
				periodic := 0
				for id, s := range m.status {
					if (s == "pending" || s == "persisting") && !m.savepoint[id] {
						periodic++
					}
				}
				if periodic > cfg.MaxConcurrent {
					t.Fatalf("step %d: %d periodic checkpoints pending, limit %d", step, periodic, cfg.MaxConcurrent)
				}
				if n := len(c.Retained()); n > cfg.Retained {
					t.Fatalf("step %d: %d retained, limit %d", step, n, cfg.Retained)
				}
				if l, ok := c.Latest(); ok && l.ID != m.latest || !ok && m.latest != 0 {
					t.Fatalf("step %d: latest %v, model %d", step, l, m.latest)
				}
				if c.ConsecutiveFailures() != m.failures {
					t.Fatalf("step %d: %d consecutive failures, model %d", step, c.ConsecutiveFailures(), m.failures)
				}
			}
		})
	}
}

func (m *model) hasPendingSavepoint() bool {
	for id, s := range m.status {
		if (s == "pending" || s == "persisting") && m.savepoint[id] {
			return true
		}
	}
	return false
}

// settle applies the coordinator's actions to the model, checking each.
func (m *model) settle(t *testing.T, acts []Action, persistedNow ID, persistQ *[]ID, cfg Config, tasks Tasks) {
	t.Helper()
	for _, a := range acts {
		switch a := a.(type) {
		case Trigger:
			if a.ID <= m.maxID {
				t.Fatalf("trigger %d after id %d", a.ID, m.maxID)
			}
			m.maxID = a.ID
			m.status[a.ID] = "pending"
			m.acked[a.ID] = map[TaskID]bool{}
			m.savepoint[a.ID] = a.Savepoint
		case Persist:
			id := a.Metadata.ID
			if m.status[id] != "pending" || len(m.acked[id]) != len(tasks.All) {
				t.Fatalf("persist %d with status %q and %d acks", id, m.status[id], len(m.acked[id]))
			}
			m.status[id] = "persisting"
			*persistQ = append(*persistQ, id)
		case NotifyComplete:
			if a.ID != persistedNow || m.status[a.ID] != "persisting" {
				t.Fatalf("notify-complete %d without its durable write (status %q)", a.ID, m.status[a.ID])
			}
			m.status[a.ID] = "completed"
			if a.ID > m.latest {
				m.failures = 0 // only progress ends a run of failures
			}
			m.latest = max(m.latest, a.ID)
		case Abort:
			if s := m.status[a.ID]; s != "pending" && s != "persisting" {
				t.Fatalf("abort %d with status %q", a.ID, s)
			}
			if m.status[a.ID] == "persisting" && a.Reason != ReasonPersistFailed {
				t.Fatalf("abort %d while its metadata was being written: %v", a.ID, a)
			}
			m.status[a.ID] = "aborted"
			// Failures of savepoints, and of checkpoints older than the
			// newest completed, do not count.
			if a.Reason.Counts() && !m.savepoint[a.ID] && a.ID > m.latest {
				m.failures++
				if m.failures > cfg.TolerableFailures && !slices.ContainsFunc(acts, func(x Action) bool { _, ok := x.(FailJob); return ok }) {
					t.Fatalf("%d consecutive failures, %d tolerated, and no fail-job", m.failures, cfg.TolerableFailures)
				}
			}
		case FailJob:
			if m.failures <= cfg.TolerableFailures {
				t.Fatalf("fail-job after %d failures, %d tolerated", m.failures, cfg.TolerableFailures)
			}
			m.running = false
		case Discard:
			if a.ID == m.latest {
				t.Fatalf("discard of the latest completed checkpoint %d", a.ID)
			}
		}
	}
}
