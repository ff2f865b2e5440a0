package local

import "sync/atomic"

// planted are defects put back by the planted-bug test of the local copy's
// generator (TestLocalCopyAgainstAModel), which must catch each; never set
// outside tests.
var planted struct {
	// sweepIgnoresBases: a sweep deletes the shared files an in-flight
	// checkpoint builds on (design note 87's review finding).
	sweepIgnoresBases atomic.Bool
	// downloadsNotKept: a restore keeps only what it read locally (before
	// design note 97).
	downloadsNotKept atomic.Bool
}
