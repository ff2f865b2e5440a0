package checkpoint

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/weirstream/weir/internal/keygroup"
)

func sampleMetadata() *Metadata {
	return &Metadata{
		Job: "wordcount", ID: 42, Triggered: t0,
		Operators: []Operator{{UID: "count", Kind: "keyed-process", MaxParallelism: 128}, {UID: "source", Kind: "source", MaxParallelism: 128}},
		Tasks: []TaskState{
			{Task: TaskID{"count", 0}, Handles: []Handle{{Operator: "count", Subtask: 0, Parallelism: 2, Kind: "keyed", KeyGroups: keygroup.Range{First: 0, Last: 63}, Path: "chk-42/count.0.keyed", SizeBytes: 1 << 20}}},
			{Task: TaskID{"count", 1}, Handles: []Handle{{Operator: "count", Subtask: 1, Parallelism: 2, Kind: "keyed", KeyGroups: keygroup.Range{First: 64, Last: 127}, Inline: []byte("small"), SizeBytes: 5}}},
			{Task: TaskID{"source", 0}},
		},
	}
}

// encode is Encode for metadata known to fit.
func encode(t testing.TB, m *Metadata) []byte {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMetadataRoundTrip(t *testing.T) {
	m := sampleMetadata()
	got, err := Decode(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
	}
}

func TestMetadataDamageIsReported(t *testing.T) {
	good := encode(t, sampleMetadata())
	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 0x10
		return b
	}
	version := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(version[8:], 99)
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"truncated header", good[:10], ErrCorrupt},
		{"truncated payload", good[:len(good)-7], ErrCorrupt},
		{"bit flip in the magic number", flip(2), ErrCorrupt},
		{"bit flip in the payload", flip(len(good) - 20), ErrCorrupt},
		{"bit flip in the checksum", flip(17), ErrCorrupt},
		{"newer format version", version, ErrVersion},
		{"trailing garbage", append(append([]byte(nil), good...), 'x'), ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.data)
			if !errors.Is(err, c.want) {
				t.Fatalf("Decode: %v, want %v", err, c.want)
			}
		})
	}
}

// TestMetadataRejectsEscapingPaths: a restore reads the files metadata names,
// so a path must not leave the checkpoint directory, even in metadata whose
// checksum is right.
func TestMetadataRejectsEscapingPaths(t *testing.T) {
	for _, p := range []string{"../../etc/passwd", "/etc/passwd", "chk-1/../../x", "a\\b", "./x", ".."} {
		m := sampleMetadata()
		m.Tasks[0].Handles[0].Path = p
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Encode accepted state path %q", p)
				}
			}()
			Encode(m)
		}()
		if err := ValidatePath(p); err == nil {
			t.Errorf("ValidatePath(%q) accepted it", p)
		}
	}
}

// FuzzDecode: no input makes Decode panic, and whatever it accepts
// re-encodes to the same metadata.
func FuzzDecode(f *testing.F) {
	good := encode(f, sampleMetadata())
	f.Add(good)
	f.Add(good[:30])
	f.Add([]byte("WEIRCHK\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		again, err := Decode(encode(t, m))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("accepted metadata does not round-trip: %v", err)
		}
	})
}
