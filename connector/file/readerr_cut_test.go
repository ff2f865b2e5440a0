package file

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestReadErrorEmitsNoPartialLine (found by an outside review, session 35): a transient read error in the
// middle of a line longer than the read buffer (64 KiB) must not emit the
// bytes read so far as a record: the line never existed in the input. A
// sink that writes at once (stdio.Print, at-least-once) prints it before
// the task fails; the exactly-once sinks drop it with the attempt.
func TestReadErrorEmitsNoPartialLine(t *testing.T) {
	mem := vfs.NewMem()
	long := strings.Repeat("x", 100<<10)
	writeFile(t, mem, "/in.txt", long+"\nnext\n")
	reads := 0
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileReadAt && op.Path == "/in.txt" {
			reads++
			if reads == 2 {
				return errors.New("injected: input/output error")
			}
		}
		return nil
	}))
	newReader, err := Lines(LinesConfig{FS: fs, Pattern: "/in.txt"})
	if err != nil {
		t.Fatal(err)
	}
	r := newReader()
	if err := r.Open(opCtx(0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	var got lines
	var readErr error
	for {
		res, err := r.Read(&got)
		if err != nil {
			readErr = err
			break
		}
		if res.Exhausted {
			break
		}
	}
	if readErr == nil {
		t.Fatal("the injected read error was not reported")
	}
	for _, l := range got {
		if l != long && l != "next" {
			t.Fatalf("emitted a line of %d bytes that is not in the input (the %d-byte line cut at the read error %v)", len(l), len(long), readErr)
		}
	}
}

// TestReadErrorEmitsNoPartialShortLine (found by an outside review, session 35): the same with short lines,
// one of which crosses the 64 KiB read buffer's end: the common case.
func TestReadErrorEmitsNoPartialShortLine(t *testing.T) {
	mem := vfs.NewMem()
	var b strings.Builder
	for b.Len() < 200<<10 {
		b.WriteString("0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopq\n"[:63] + "\n")
		b.WriteString("short\n")
	}
	writeFile(t, mem, "/in.txt", b.String())
	reads := 0
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileReadAt && op.Path == "/in.txt" {
			if reads++; reads == 2 {
				return errors.New("injected: input/output error")
			}
		}
		return nil
	}))
	newReader, err := Lines(LinesConfig{FS: fs, Pattern: "/in.txt"})
	if err != nil {
		t.Fatal(err)
	}
	r := newReader()
	if err := r.Open(opCtx(0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	var got lines
	for {
		res, err := r.Read(&got)
		if err != nil || res.Exhausted {
			break
		}
	}
	want := map[string]bool{"0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopq"[:63]: true, "short": true}
	for _, l := range got {
		if !want[l] {
			t.Fatalf("emitted %q, which is no line of the input (cut at the read error), after %d lines", l, len(got)-1)
		}
	}
}
