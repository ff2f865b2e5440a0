package web

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSavepointTimeoutSaysTheSavepointGoesOn (outside review, operator on
// call): `weir savepoint --stop --timeout D` whose savepoint outlasts D
// said only "context deadline exceeded", and the job stopped anyway once
// the savepoint completed; without --stop, "not complete within D", and
// the savepoint completed and stayed. Each error now says what goes on in
// the job and where to look.
func TestSavepointTimeoutSaysTheSavepointGoesOn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Query().Get("stop") == "true":
			<-r.Context().Done() // answered once complete: never, here
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(`{"id":7,"status":"in_progress"}`))
		default:
			w.Write([]byte(`[{"id":7,"status":"in_progress"}]`))
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--stop"}, []string{"no answer within --timeout 50ms", "the job stops once it completes", "stopped with savepoint N"}},
		{nil, []string{"savepoint 7: not complete within 50ms", "it goes on in the job", "weir savepoint dispose"}},
	} {
		for _, cmd := range Commands() {
			if cmd.Name() != "savepoint" {
				continue
			}
			cmd.SetArgs(append([]string{"--web", srv.Listener.Addr().String(), "--token", "t", "--timeout", "50ms"}, tc.args...))
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			err := cmd.Execute()
			if err == nil {
				t.Fatalf("savepoint %v: no error; want the timeout's", tc.args)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("savepoint %v: %v\nwant it to say %q", tc.args, err, w)
				}
			}
		}
	}
}
