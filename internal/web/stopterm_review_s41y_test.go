package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/runtime"
)

// TestS41yStopAnswersWhenAnHALeaderIsDeposedAfterTheSavepoint: stop with a
// savepoint under --ha. Savepoint 7 completes; before the tasks committed
// it and ended, the leader's etcd lease lapses: lead (cluster.go) cancels
// the term's run (runtime.Run returns through driver.stopped, which emits
// no event), stands by, and calls neither End nor anything that counts a
// restart. The next term (here or on a standby) runs the job on from its
// latest checkpoint: runtime.Run emits EventRunning, attempt 1, restored
// from 7. The job runs; it did not stop. awaitStop waits for an End, a
// restart counted, or EventFinished: none comes, and the request hangs
// until the caller gives up (weir savepoint --stop: --timeout, 1 minute),
// whose message then says the job "stops once it completes and is
// committed". The answer the change promises (a 409: the job did not stop
// with it, stop it again) never comes.
func TestS41yStopAnswersWhenAnHALeaderIsDeposedAfterTheSavepoint(t *testing.T) {
	ctl := Control{Token: "t", Savepoint: func(context.Context, bool) (uint64, error) { return 7, nil }}
	s := New("demo", Feeds{Operators: func() []Operator { return nil }}, ctl, nil)
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 1})
	h := s.Handler()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := httptest.NewRequest(http.MethodPost, "/api/v1/savepoints?stop=true", nil).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer t")
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, req)
	}()
	for {
		s.mu.Lock()
		_, waiting := s.settled[7]
		s.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: 7, Savepoint: true})
	// Deposed: no event. The next term runs the job on from savepoint 7.
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 1, RestoredFrom: 7, RestoredSavepoint: true})
	select {
	case <-done:
		t.Logf("answered %d: %s", rec.Code, rec.Body.String())
		if rec.Code == http.StatusAccepted {
			t.Fatalf("answered 202 (stopped) for a job that runs on")
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("no answer 3 s after the job ran on in a new term (state %q): the stop request waits until the caller's timeout", s.jobState().State)
	}
}
