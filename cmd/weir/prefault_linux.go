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
// (design note 117): it allocates n bytes, asks the kernel for huge pages
// there (MADV_HUGEPAGE, honoured where transparent huge pages are "always"
// or "madvise"), writes a byte of every page, and frees them, so that the
// heap's next n bytes reuse those pages. Without it, every page of the
// heap floor costs a page fault the first time a job writes it, 4 KiB at
// a time, 11-19 µs each on the virtual machine it was measured on: about a
// tenth of the CPU of a word count over 8 M words. Where the kernel gives no huge pages
// ("never"), writing the pages would only move those faults earlier, so
// it does nothing. The collector is off meanwhile: it would start a cycle
// half-way, and keep a mark worker spinning on an idle core.
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
	for i := 0; i < len(r); i += unix.Getpagesize() {
		r[i] = 1
	}
	runtime.KeepAlive(b)
	runtime.GC() // frees b's pages for the heap to reuse
}
