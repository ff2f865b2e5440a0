package main

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on Linux (x86-64 and
// arm64 with 4 KiB pages).
const hugePage = 2 << 20

// prefault backs n bytes of the heap with memory before a job needs it,
// as the JVM's -XX:+AlwaysPreTouch with transparent huge pages does
// (design note 117): it allocates n bytes (2 MiB-aligned, inside a block
// 2 MiB larger), asks the kernel for huge pages there (MADV_HUGEPAGE, honoured where transparent huge pages are "always"
// or "madvise"), writes a byte of every page, and frees them, so that the
// heap's next n bytes reuse those pages. Without it, every page of the
// heap floor costs a page fault the first time a job writes it, 4 KiB at
// a time, 11-19 µs each on the virtual machine it was measured on: about a
// tenth of the CPU of a word count over 8 M words. Where the kernel gives
// no huge pages (the mode "never"; a process it refuses them, by
// prctl(PR_SET_THP_DISABLE) or for want of free ones), writing the pages
// would only move those faults earlier: it stops at the first 2 MiB that
// took faults for more than a quarter of its pages. The collector is off meanwhile: it would
// start a cycle half-way, and keep a mark worker spinning on an idle core.
func prefault(n int) {
	if thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || bytes.Contains(thp, []byte("[never]")) {
		return
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	b := make([]byte, n+hugePage)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	skip := int((hugePage - start%hugePage) % hugePage)
	r := b[skip : skip+n]
	if unix.Madvise(r, unix.MADV_HUGEPAGE) != nil {
		return
	}
	page := unix.Getpagesize()
	for h := 0; h+hugePage <= len(r); h += hugePage {
		before := minorFaults()
		for i := h; i < h+hugePage; i += page {
			r[i] = 1
		}
		if minorFaults()-before > int64(hugePage/page/4) {
			break // small pages: the rest would only fault earlier
		}
	}
	runtime.KeepAlive(b)
	runtime.GC() // frees b's pages for the heap to reuse
}

// minorFaults is the page faults of the process so far that read nothing
// from disk (0 if getrusage failed, which only leaves the check undone).
func minorFaults() int64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Minflt
}
