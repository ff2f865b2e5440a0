package checkpoint

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestFit: a restore is checked against the job before anything is
// restored; every mismatch is refused with a message that says what differs
// and what to do.
func TestFit(t *testing.T) {
	m := sampleMetadata() // job wordcount: count (keyed-process, keyed state), source (no state)
	m.Tasks[2].Handles = []Handle{{Operator: "source", Parallelism: 1, Kind: "list-split:splits", Inline: []byte{}}}
	same := slices.Clone(m.Operators)
	cases := []struct {
		name             string
		job              string
		ops              []Operator
		allowNonRestored bool
		want             []string // substrings of the error; none: it fits
		fresh, dropped   []string
	}{
		{name: "the same job", job: "wordcount", ops: same},
		{
			name: "a new operator starts fresh", job: "wordcount",
			ops:   append(slices.Clone(same), Operator{UID: "filter", Kind: "flatmap", MaxParallelism: 128}),
			fresh: []string{"filter"},
		},
		{
			name: "another job", job: "other", ops: same,
			want: []string{`checkpoint 42 belongs to job "wordcount", not "other"`},
		},
		{
			name: "a renamed operator leaves its state unclaimed", job: "wordcount",
			ops:  []Operator{{UID: "count-v2", Kind: "keyed-process", MaxParallelism: 128}, same[1]},
			want: []string{`no operator of this job claims the state of "count" (keyed-process)`, "weir.UID", "--allow-non-restored-state"},
		},
		{
			name: "unclaimed state dropped when allowed", job: "wordcount", allowNonRestored: true,
			ops:     []Operator{{UID: "count-v2", Kind: "keyed-process", MaxParallelism: 128}, same[1]},
			fresh:   []string{"count-v2"},
			dropped: []string{`"count" (keyed-process)`},
		},
		{
			name: "another kind under the same UID", job: "wordcount",
			ops:  []Operator{{UID: "count", Kind: "sink", MaxParallelism: 128}, same[1]},
			want: []string{`operator "count" is a keyed-process in the checkpoint but a sink in this job`},
		},
		{
			name: "another max parallelism", job: "wordcount",
			ops: []Operator{{UID: "count", Kind: "keyed-process", MaxParallelism: 64}, {UID: "source", Kind: "source", MaxParallelism: 64}},
			// The source has no keyed state: its max parallelism does not matter.
			want: []string{`operator "count": the checkpoint's keyed state is split into max parallelism 128 key groups, this job has max parallelism 64: set it back to 128`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fit, err := m.Fit(c.job, c.ops, c.allowNonRestored)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(fit.Fresh, c.fresh) || !slices.Equal(fit.Dropped, c.dropped) {
					t.Fatalf("fresh %v dropped %v, want %v and %v", fit.Fresh, fit.Dropped, c.fresh, c.dropped)
				}
				return
			}
			if !errors.Is(err, ErrMismatch) {
				t.Fatalf("error %v does not wrap ErrMismatch", err)
			}
			if strings.Contains(err.Error(), `operator "source"`) {
				t.Errorf("the stateless source is named: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestEncodeRefusesOversizedMetadata(t *testing.T) {
	m := sampleMetadata()
	m.Tasks[1].Handles[0].Inline = make([]byte, MaxMetadataBytes)
	_, err := Encode(m)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "64 MiB") {
		t.Fatalf("Encode of oversized metadata: %v", err)
	}
}

// TestDecodeRefusesUncheckableMetadata: metadata of format version 1 has no
// fingerprint to check a restore against, and state must belong to an
// operator the metadata lists.
func TestDecodeRefusesUncheckableMetadata(t *testing.T) {
	good := encode(t, sampleMetadata())
	v1 := slices.Clone(good)
	v1[11] = 1
	if _, err := Decode(v1); !errors.Is(err, ErrVersion) {
		t.Fatalf("version 1: %v", err)
	}
	m := sampleMetadata()
	m.Operators = m.Operators[1:]
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), `state of operator "count", which the job's operators do not list`) {
				t.Fatalf("Encode of state of an unlisted operator: %v", r)
			}
		}()
		Encode(m)
	}()
}
