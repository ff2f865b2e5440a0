package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir"
)

// A job cancelled through the API while an attempt had failed ends with
// "job J stopped (CAUSE) after a failure: F"; the exit message names who
// cancelled, and nothing of the failure (it cut the text at "job
// cancelled", leaving a stray parenthesis and the failure glued on; found
// by an outside review).
func TestCancelAfterAFailureSaysWhoCleanly(t *testing.T) {
	cause := &weir.CancelledError{By: "alice@host (127.0.0.1:5000)"}
	err := fmt.Errorf("job wordcount stopped (%w) after a failure: %w", cause, errors.New("task count#0 failed: boom"))
	cmd := &cobra.Command{}
	cmd.SetContext(context.Background())
	msg := interrupted(checkpointFlags{}, err, cmd, false).Error()
	if want := "job cancelled through the API by alice@host (127.0.0.1:5000)"; msg != want {
		t.Fatalf("exit message %q, want %q", msg, want)
	}
}
