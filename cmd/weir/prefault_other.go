//go:build !linux

package main

// prefault does nothing where the kernel's calls for it are not known.
func prefault(int) {}
