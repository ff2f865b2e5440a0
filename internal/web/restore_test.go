package web

import (
	"strings"
	"testing"
)

// TestRestoreBytesMetric: weir_restore_bytes_total counts the bytes
// restores read by source, as the feed reads them at each scrape; without
// the feed (local recovery off) it is absent.
func TestRestoreBytesMetric(t *testing.T) {
	local, remote := int64(0), int64(0)
	s := New("demo", Feeds{Operators: func() []Operator { return nil }, RestoredBytes: func() (int64, int64) { return local, remote }}, Control{}, nil)
	local, remote = 1500, 20
	metrics := get(t, s.Handler(), "/metrics")
	for _, want := range []string{
		"# TYPE weir_restore_bytes_total counter",
		`weir_restore_bytes_total{job="demo",source="local"} 1500`,
		`weir_restore_bytes_total{job="demo",source="remote"} 20`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if off := get(t, New("demo", Feeds{Operators: func() []Operator { return nil }}, Control{}, nil).Handler(), "/metrics"); strings.Contains(off, "weir_restore_bytes_total") {
		t.Error("weir_restore_bytes_total without local recovery")
	}
}
