package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
)

func sampleKeyed(r keygroup.Range) []byte {
	return EncodeKeyed(r, []KeyedSection{{Name: "counts", Append: func(dst []byte, g int) []byte {
		return codec.AppendBytes(dst, []byte(fmt.Sprint("group", g)))
	}}})
}

func TestKeyedReadsOnlyTheWantedGroups(t *testing.T) {
	blob := sampleKeyed(keygroup.Range{First: 10, Last: 20})
	var got []string
	err := DecodeKeyed(blob, keygroup.Range{First: 15, Last: 30}, func(name string, g int, entries []byte) error {
		b, _, err := codec.ReadBytes(entries)
		got = append(got, fmt.Sprintf("%s/%d/%s", name, g, b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"counts/15/group15", "counts/16/group16", "counts/17/group17", "counts/18/group18", "counts/19/group19", "counts/20/group20"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestListRedistribution(t *testing.T) {
	blobs := map[string][]byte{}
	var hs []checkpoint.Handle
	for sub := range 2 {
		var items [][]byte
		for i := range 3 {
			items = append(items, []byte(fmt.Sprintf("s%d-%d", sub, i)))
		}
		kind, blob := EncodeList(Split, "splits", items)
		path := fmt.Sprint(sub)
		blobs[path] = blob
		// Handles arrive in any order; items are dealt in old-subtask order.
		hs = append([]checkpoint.Handle{{Operator: "src", Subtask: sub, Parallelism: 2, Kind: kind, Path: path}}, hs...)
	}
	read := func(h checkpoint.Handle) ([]byte, error) { return blobs[h.Path], nil }
	var all []string
	for i := range 4 {
		items, err := RestoreList(hs, read, Split, "splits", i, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			all = append(all, fmt.Sprintf("%d:%s", i, it))
		}
	}
	want := []string{"0:s0-0", "0:s1-1", "1:s0-1", "1:s1-2", "2:s0-2", "3:s1-0"}
	slices.Sort(all)
	if !slices.Equal(all, want) {
		t.Fatalf("split 6 items over 4 subtasks: %v, want %v", all, want)
	}
	union, _ := RestoreList(hs, read, Union, "splits", 0, 4)
	if len(union) != 0 {
		t.Fatalf("union state of another name: %v", union)
	}
}

// fixChecksum makes the trailing CRC match, so that fuzzing reaches the
// parser behind the checksum.
func fixChecksum(blob []byte) {
	if len(blob) >= 4 {
		binary.BigEndian.PutUint32(blob[len(blob)-4:], crc32.Checksum(blob[:len(blob)-4], castagnoli))
	}
}

// FuzzDecodeKeyed: damaged keyed state is an error, never a panic or a read
// out of bounds.
func FuzzDecodeKeyed(f *testing.F) {
	f.Add(sampleKeyed(keygroup.Range{First: 0, Last: 3}), 0, 3)
	f.Add(sampleKeyed(keygroup.Range{First: 5, Last: 5}), 5, 9)
	f.Fuzz(func(t *testing.T, blob []byte, first, last int) {
		fixChecksum(blob)
		want := keygroup.Range{First: first % 1024, Last: last % 1024}
		err := DecodeKeyed(blob, want, func(string, int, []byte) error { return nil })
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("unclassified error %v", err)
		}
	})
}

// FuzzDecodeList: the same for operator list state.
func FuzzDecodeList(f *testing.F) {
	_, blob := EncodeList(Split, "x", [][]byte{[]byte("a"), nil, []byte("bc")})
	f.Add(blob)
	f.Fuzz(func(t *testing.T, blob []byte) {
		fixChecksum(blob)
		items, err := decodeList(blob)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("unclassified error %v", err)
		}
		if err == nil {
			_, again := EncodeList(Split, "x", items)
			if back, err := decodeList(again); err != nil || len(back) != len(items) {
				t.Fatalf("accepted list does not round-trip: %v", err)
			}
		}
	})
}
