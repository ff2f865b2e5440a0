package pgtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// freshTmp points os.TempDir at a directory of the test's own, that the
// postgres user can traverse when the test runs as root.
func freshTmp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pgtest-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	t.Setenv("TMPDIR", d)
	return d
}

// templateIn is the one template in tmp.
func templateIn(t *testing.T, tmp string) string {
	t.Helper()
	all, _ := filepath.Glob(filepath.Join(tmp, "weir-pgtest-*"))
	if len(all) != 1 || filepath.Base(all[0])[:len("weir-pgtest-initdb")] == "weir-pgtest-initdb" {
		t.Fatalf("want one template in %s, and no initdb directory: %q", tmp, all)
	}
	return all[0]
}

func connects(t *testing.T, s *Server) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
}

// TestDamagedTemplateIsMadeAgain: a template that is not whole (a tmp
// cleaner's partial sweep), of another major version or of another owner
// is moved aside and made again, so the next server starts. (Found by a
// review: each made every later Start fail, in every later run.)
func TestDamagedTemplateIsMadeAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, tmpl string) error
	}{
		{"no PG_VERSION", func(t *testing.T, tmpl string) error { return os.Remove(filepath.Join(tmpl, "PG_VERSION")) }},
		{"no pg_control", func(t *testing.T, tmpl string) error { return os.Remove(filepath.Join(tmpl, "global", "pg_control")) }},
		{"another major", func(t *testing.T, tmpl string) error {
			return os.WriteFile(filepath.Join(tmpl, "PG_VERSION"), []byte("9\n"), 0o600)
		}},
		{"another owner", func(t *testing.T, tmpl string) error {
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			return exec.Command("chown", "-R", "nobody:nogroup", tmpl).Run()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := freshTmp(t)
			connects(t, Start(t))
			if err := tc.damage(t, templateIn(t, tmp)); err != nil {
				t.Fatal(err)
			}
			connects(t, Start(t))
			templateIn(t, tmp)
		})
	}
}

// TestTemplateOfConcurrentBinaries: test binaries started at once on an
// empty temporary directory each start a server; one template is left.
func TestTemplateOfConcurrentBinaries(t *testing.T) {
	if os.Getenv("PGTEST_CHILD") == "1" {
		connects(t, Start(t))
		return
	}
	tmp := freshTmp(t)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestTemplateOfConcurrentBinaries$", "-test.count=1")
			cmd.Env = append(os.Environ(), "PGTEST_CHILD=1", "TMPDIR="+tmp)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("binary %d: %v\n%s", i, err, out)
			}
		})
	}
	wg.Wait()
	templateIn(t, tmp)
}
