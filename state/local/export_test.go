package local

import "sync/atomic"

// Planted gives the generator's planted-bug test the defects to put back.
func Planted() map[string]*atomic.Bool {
	return map[string]*atomic.Bool{
		"a sweep deletes the shared files an in-flight checkpoint builds on": &planted.sweepIgnoresBases,
		"a restore keeps only what it read locally":                          &planted.downloadsNotKept,
	}
}
