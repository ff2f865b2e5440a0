// Package model holds Promela models of the checkpoint protocol and the test
// that checks them exhaustively with SPIN: dataflow.pml (the coordinator,
// barrier alignment in every mode, end of input, a two-phase-commit sink,
// failover) and leader.pml (leader changes with epochs on etcd). README.md
// maps each model action to the Go function it models and says how to run
// the checker; design note 91 says what the models prove and what they
// abstract away. The package has no Go code besides its test.
package model
