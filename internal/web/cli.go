package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/cobra"

	"github.com/weirstream/weir/storage"
)

// Commands are the CLI's commands on a running job's API (savepoint,
// cancel, checkpoints, list) and on its storage (savepoint dispose). weir
// and job programs (weir.Main) add them.
func Commands() []*cobra.Command {
	var addr, token string
	var timeout time.Duration
	var stop bool
	flags := func(cmd *cobra.Command, mutates bool) *cobra.Command {
		cmd.Flags().StringVar(&addr, "web", "", "the job's --web address (host:port)")
		if mutates {
			cmd.Flags().StringVar(&token, "token", os.Getenv("WEIR_WEB_TOKEN"), "the job's --web-token (default $WEIR_WEB_TOKEN)")
		}
		cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "give up after this long")
		cmd.Args = cobra.MaximumNArgs(1)
		cmd.Use += " [JOB]"
		return cmd
	}
	savepoint := flags(&cobra.Command{
		Use:   "savepoint",
		Short: "Take a savepoint of a running job (--stop: then stop it) and print where it is, for --restore; Weir never deletes it",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd.Context(), addr, token, timeout, args)
			if err != nil {
				return err
			}
			defer c.cancel()
			var started Checkpoint
			path := "/api/v1/savepoints"
			if stop {
				path += "?stop=true"
			}
			if err := c.do(http.MethodPost, path, http.StatusAccepted, &started); err != nil {
				if stop && errors.Is(err, context.DeadlineExceeded) {
					// The job answers once it stopped: it may have taken
					// the request and still stop.
					return fmt.Errorf("%w\nno answer within --timeout %v: if the job took the request, its savepoint goes on and the job stops once it completes and is committed (its log then says \"stopped with savepoint N\" and how to resume); `weir checkpoints` shows the savepoint while the job runs", err, timeout)
				}
				return err
			}
			if stop { // answered once the job stopped
				fmt.Fprintf(cmd.OutOrStdout(), "savepoint %d: %s\n", started.ID, started.Location)
				return nil
			}
			for {
				var cs []Checkpoint
				if err := c.do(http.MethodGet, "/api/v1/checkpoints", http.StatusOK, &cs); err != nil {
					return err
				}
				for _, cp := range cs {
					if cp.ID != started.ID || cp.Status == "in_progress" {
						continue
					}
					if cp.Status != "completed" {
						return fmt.Errorf("savepoint %d was aborted: %s", cp.ID, cp.Reason)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "savepoint %d: %s\n", cp.ID, cp.Location)
					return nil
				}
				select {
				case <-c.ctx.Done():
					return fmt.Errorf("savepoint %d: not complete within %v; it goes on in the job, and once complete it stays, as every savepoint (`weir checkpoints` shows it, `weir savepoint dispose` deletes it)", started.ID, timeout)
				case <-time.After(100 * time.Millisecond): // polling the job's history
				}
			}
		},
	}, true)
	savepoint.Flags().BoolVar(&stop, "stop", false, "stop the job once the savepoint completes (resume it with --restore <the savepoint>)")
	savepoint.AddCommand(&cobra.Command{
		Use:   "dispose PATH",
		Short: "Delete a savepoint (a chk-<id> directory or URL that `weir savepoint` printed); Weir never deletes one itself",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := storage.DisposeSavepoint(cmd.Context(), vfs.Default, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "savepoint %d disposed: %s\n", d.ID, args[0])
			if d.SharedKept {
				fmt.Fprintf(cmd.OutOrStdout(), "the shared files only it used stay until the job's next start deletes them (%v)\n", d.Held)
			}
			return nil
		},
	})
	cancel := flags(&cobra.Command{
		Use:   "cancel",
		Short: "Cancel a running job (its checkpoints are kept, to resume with --restore latest)",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd.Context(), addr, token, timeout, args)
			if err != nil {
				return err
			}
			defer c.cancel()
			var ans struct{ Job, State string }
			if err := c.do(http.MethodPost, "/api/v1/cancel", http.StatusAccepted, &ans); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %s: %s (its run exits with status 130; a run that keeps its checkpoints resumes with --restore latest)\n", ans.Job, ans.State)
			return nil
		},
	}, true)
	checkpoints := flags(&cobra.Command{
		Use:   "checkpoints",
		Short: "List a running job's checkpoints in progress (acknowledged tasks, age) and its last checkpoints: how their tasks aligned (aligned, unaligned, switched by the aligned-checkpoint timeout) and the channel state they hold",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd.Context(), addr, "", timeout, args)
			if err != nil {
				return err
			}
			defer c.cancel()
			var cs []Checkpoint
			if err := c.do(http.MethodGet, "/api/v1/checkpoints", http.StatusOK, &cs); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tSTATUS\tAT\tDURATION\tBYTES\tALIGNMENT\tCHANNEL STATE BYTES\tSLOWEST TASK / REASON")
			for _, cp := range cs {
				kind, what := "checkpoint", cp.Slowest
				if cp.Savepoint {
					kind = "savepoint"
				}
				if cp.Status == "in_progress" {
					// Its duration so far; what it holds is not known yet.
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.0fms\t-\t-\t-\t%s\n", cp.ID, kind, cp.Status, cp.At.Format("15:04:05.000"), cp.Age*1000, inProgressOf(cp))
					continue
				}
				if cp.Status != "completed" {
					what = cp.Reason
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.0fms\t%d\t%s\t%s\t%s\n", cp.ID, kind, cp.Status, cp.At.Format("15:04:05.000"), cp.Duration*1000, cp.Size,
					alignmentOf(cp), channelStateOf(cp), what)
			}
			return tw.Flush()
		},
	}, false)
	list := flags(&cobra.Command{
		Use:   "list",
		Short: "Show the job a process runs: its state, attempt, restarts and last checkpoint",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient(cmd.Context(), addr, "", timeout, args)
			if err != nil {
				return err
			}
			defer c.cancel()
			var j Job
			if err := c.do(http.MethodGet, "/api/v1/job", http.StatusOK, &j); err != nil {
				return err
			}
			last := "none yet"
			if j.LastCheckpoint != nil {
				last = fmt.Sprintf("%.1fs ago", time.Since(*j.LastCheckpoint).Seconds())
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tSTATE\tUPTIME\tATTEMPT\tRESTARTS\tLAST CHECKPOINT")
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", j.Name, j.State, time.Since(j.Started).Round(time.Second), j.Attempt, j.Restarts, last)
			return tw.Flush()
		},
	}, false)
	return []*cobra.Command{savepoint, cancel, checkpoints, list}
}

// alignmentOf says how checkpoint cp's tasks snapshotted: "aligned", or
// how many of them went unaligned ("unaligned 3/4 tasks") or were
// switched to unaligned by the aligned-checkpoint timeout ("switched 1/4
// tasks"); "-" for an aborted checkpoint, or from a job that does not say.
func alignmentOf(cp Checkpoint) string {
	switch {
	case cp.Status != "completed" || cp.Alignment == "":
		return "-"
	case cp.UnalignedTasks == 0:
		return "aligned"
	case cp.SwitchedTasks == 0:
		return fmt.Sprintf("unaligned %d/%d tasks", cp.UnalignedTasks, cp.AckedTasks)
	case cp.SwitchedTasks == cp.UnalignedTasks:
		return fmt.Sprintf("switched %d/%d tasks", cp.SwitchedTasks, cp.AckedTasks)
	}
	return fmt.Sprintf("unaligned %d/%d tasks, %d switched", cp.UnalignedTasks, cp.AckedTasks, cp.SwitchedTasks)
}

// inProgressOf says of a checkpoint in progress how many of its tasks
// acknowledged and how old it is: "acks 3/4, age 1.2s".
func inProgressOf(cp Checkpoint) string {
	return fmt.Sprintf("acks %d/%d, age %s", cp.AckedTasks, cp.TotalTasks, (time.Duration(cp.Age * float64(time.Second))).Round(100*time.Millisecond))
}

// channelStateOf is the bytes of channel state checkpoint cp holds; "-"
// for an aborted checkpoint, or from a job that does not say.
func channelStateOf(cp Checkpoint) string {
	if cp.Status != "completed" || cp.Alignment == "" {
		return "-"
	}
	return strconv.FormatInt(cp.ChannelState, 10)
}

type client struct {
	ctx    context.Context
	cancel context.CancelFunc
	base   string
	token  string
}

// newClient returns a client of the API at addr; with a job named (args),
// it checks first that the process runs that job.
func newClient(ctx context.Context, addr, token string, timeout time.Duration, args []string) (*client, error) {
	if addr == "" {
		return nil, errors.New("--web is required: the address the job serves its API at")
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("--timeout %v: must be above 0", timeout)
	}
	// The job prints its UI's URL ("web UI at http://127.0.0.1:8081/"):
	// take that too.
	if rest, ok := strings.CutPrefix(addr, "http://"); ok {
		addr = strings.TrimSuffix(rest, "/")
	}
	if strings.Contains(addr, "://") || strings.Contains(addr, "/") {
		return nil, fmt.Errorf("--web %s: want the address the job serves its API at, host:port (as in its log line \"web UI at http://host:port/\")", addr)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	c := &client{ctx: ctx, cancel: cancel, base: "http://" + addr, token: token}
	if len(args) == 1 {
		if err := c.do(http.MethodGet, "/api/v1/jobs/"+url.PathEscape(args[0]), http.StatusOK, nil); err != nil {
			cancel()
			return nil, err
		}
	}
	return c, nil
}

// requestedByHeader names the user and host that run a CLI command, so
// that the job can say who cancelled it.
const requestedByHeader = "Weir-Requested-By"

// whoAmI is "user@host" of this process, as far as they are known.
func whoAmI() string {
	name := "unknown user"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown host"
	}
	return name + "@" + host
}

// requester describes who sent r: the user and host the CLI names (at most
// 64 printable characters; a claim, not authenticated, beyond the token)
// and the address it came from.
func requester(r *http.Request) string {
	who := strings.Map(func(c rune) rune {
		if !unicode.IsPrint(c) {
			return -1
		}
		return c
	}, r.Header.Get(requestedByHeader))
	if who == "" {
		return r.RemoteAddr
	}
	if rs := []rune(who); len(rs) > 64 {
		who = string(rs[:64]) + "…"
	}
	return fmt.Sprintf("%s (%s)", who, r.RemoteAddr)
}

// do sends a request and decodes the answer into out (if set), which must
// have status want.
func (c *client) do(method, path string, want int, out any) error {
	req, err := http.NewRequestWithContext(c.ctx, method, c.base+path, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set(requestedByHeader, whoAmI())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, c.base+path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		err := fmt.Errorf("%s %s: %s: %s", method, c.base+path, resp.Status, strings.TrimSpace(string(body)))
		if resp.StatusCode == http.StatusUnauthorized {
			err = fmt.Errorf("%w; give this command the job's --web-token with --token, or in $WEIR_WEB_TOKEN", err)
		}
		return err
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, out)
}
