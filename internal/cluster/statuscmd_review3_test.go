package cluster

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/weirstream/weir/internal/etcdtest"
	"github.com/weirstream/weir/internal/transport"
)

// TestReview3StatusOfAnEndedHAJob: bbec432 records how a highly available
// job ended (etcd's <prefix>/jobs/<job>/ended: "stopped with savepoint N",
// "cancelled: …", "failed: …") and tells the operator to start its
// coordinators with --restore latest to run it on. But `weir status --ha
// --job` never reads that record: once the coordinators exited it says
// "no coordinator of job … campaigns in etcd (is the job's name right?
// its coordinators' --ha?)", which points at a typo, not at the stop,
// and never names the savepoint to resume.
func TestReview3StatusOfAnEndedHAJob(t *testing.T) {
	e := etcdtest.Start(t, 1)
	certs := filepath.Join(t.TempDir(), "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "admin"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Put(context.Background(), "/weir/jobs/wordcount/ended", "stopped with savepoint 17"); err != nil {
		t.Fatal(err)
	}
	cmd := StatusCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--ha", "etcd://" + strings.Join(e.Hosts(), ",") + "/weir", "--job", "wordcount", "--certs", certs, "--timeout", "5s"})
	err = cmd.Execute()
	said := out.String()
	if err != nil {
		said += err.Error()
	}
	if !strings.Contains(said, "stopped with savepoint 17") {
		t.Errorf("weir status of a job that stopped with savepoint 17 does not say so: %q", said)
	}
}
