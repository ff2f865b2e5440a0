package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStartAndRestart: the server accepts connections, has prepared
// transactions enabled, and comes back after a restart.
func TestStartAndRestart(t *testing.T) {
	s := Start(t)
	for range 2 {
		conn, err := pgx.Connect(context.Background(), s.URL)
		if err != nil {
			t.Fatal(err)
		}
		var v string
		if err := conn.QueryRow(context.Background(), "SHOW max_prepared_transactions").Scan(&v); err != nil || v != "64" {
			t.Fatalf("max_prepared_transactions %q: %v", v, err)
		}
		conn.Close(context.Background())
		s.Restart()
	}
}
