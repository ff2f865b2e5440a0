package wordcount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/internal/pgtest"
)

// TestEndsAreURLsOrPaths: an input or output that begins like a URL is
// read as one, its scheme in any case; a scheme the word count does not
// serve is an error naming the schemes it serves, never a local directory
// named after the URL; queries are parsed strictly and table names
// checked, before anything is written or connected to; no error repeats a
// password; an input that matches the output's files is refused.
func TestEndsAreURLsOrPaths(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	f, _ := fs.Create("/in/a.txt", vfs.WriteCategoryUnspecified)
	f.Write([]byte("a b a\n"))
	f.Close()
	for _, c := range []struct {
		input, output string
		want          []string
	}{
		{"/in/a.txt", "mysql://x/y", []string{"output mysql://x/y", "no mysql: URL", "kafka://host:port/topic, postgres://"}},
		{"/in/a.txt", "mysql://u:secret@x/y", []string{"output mysql://u:xxxxx@x/y"}},
		{"/in/a.txt", "s3://bucket/counts", []string{"no s3: URL"}},
		{"/in/a.txt", "out:put", []string{"no out: URL", "./"}},
		{"/in/a.txt", "Kafka://127.0.0.1:1", []string{"no topic"}},
		{"/in/a.txt", "KAFKA://127.0.0.1:1/a;b", []string{`topic "a;b"`}},
		{"/in/a.txt", "kafka:/127.0.0.1:1/counts", []string{"want kafka://host:port/topic"}},
		{"kafka:/127.0.0.1:1/lines", "/out", []string{"want kafka://host:port/topic"}},
		{"Kafka://127.0.0.1:1/lines?bounded=true;start=earliest", "/out", []string{"invalid semicolon separator"}},
		{"mysql://x/y", "/out", []string{"input mysql://x/y", "kafka://host:port/topic, or a file path"}},
		{"/in/a.txt", "POSTGRES://u@127.0.0.1:1/db?table=Counts", []string{`table="Counts"`, "lower case (counts)"}},
		{"/in/a.txt", "postgres://u@127.0.0.1:1/db?table=my;table", []string{"invalid semicolon separator"}},
		{"/in/a.txt", "postgres://u:secret@127.0.0.1:1/db?table=my;table", []string{"postgres URL postgres://u:xxxxx@127.0.0.1:1/db"}},
		{"/in/a.txt", "postgres://u:secret@127.0.0.1:x/db", []string{"invalid port"}},
		{"/in/a.txt", "postgres://u@127.0.0.1:1/db?table=a&table=b", []string{"option table given 2 times"}},
		{"/in/a.txt", "postgresql://u@127.0.0.1:1/db?table=", []string{`table=""`}},
		// An input that matches the output's files: a restore would read
		// them (outside review).
		{"/in/*", "/in", []string{"input /in/* matches the output's files (/in/part-output-0-1)", "write the output elsewhere"}},
		{"/*/*", "/out/", []string{"input /*/* matches the output's files (/out/part-output-0-1)"}},
	} {
		_, err := Build(Options{FS: fs, Input: c.input, Output: c.output, Parallelism: 1, Checkpoint: weir.CheckpointConfig{Mode: weir.NoCheckpoints}})
		if err == nil {
			t.Errorf("--input %s --output %s: built; want an error", c.input, c.output)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("--input %s --output %s: %v\nwant it to say %q", c.input, c.output, err, w)
			}
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("--output %s: %v repeats the password", c.output, err)
		}
	}
	if names, err := fs.List("/"); err != nil || len(names) != 1 {
		t.Fatalf("written: %v %v; want only /in", names, err)
	}
}

func TestCheckTableName(t *testing.T) {
	for name, want := range map[string]string{
		"counts":                       "",
		"_c0.counts_2":                 "",
		"time":                         "", // a key word, but not reserved for names
		"":                             "want a table name",
		"a.b.c":                        "want a table name",
		"a.":                           "want a table name",
		"my;table":                     `character ';'`,
		"my-table":                     `character '-'`,
		`"Counts"`:                     `character '"'`,
		"Counts":                       "lower case (counts)",
		"Public.Counts":                "lower case (public.counts)",
		"select":                       "reserved key word",
		"public.user":                  "reserved key word",
		"1counts":                      "starts with a digit",
		strings.Repeat("c", 63):        "",
		strings.Repeat("c", 64):        "is 64 bytes",
		"s." + strings.Repeat("c", 64): "is 64 bytes",
	} {
		err := checkTableName(name)
		if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("checkTableName(%q) = %v; want %q", name, err, want)
		}
	}
}

// TestReservedWordsArePostgreSQLs: every key word the server says cannot
// name a table unquoted is refused by checkTableName.
func TestReservedWordsArePostgreSQLs(t *testing.T) {
	pg := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT word FROM pg_get_keywords() WHERE catcode IN ('R', 'T')")
	if err != nil {
		t.Fatal(err)
	}
	words, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(words) < 50 {
		t.Fatalf("the server reports %d reserved key words: %v", len(words), words)
	}
	for _, w := range words {
		if !reservedWords[w] {
			t.Errorf("%q is reserved in PostgreSQL but not in reservedWords", w)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE TEMP TABLE %s (x int)", w)); err == nil {
			t.Errorf("PostgreSQL created a table named %s", w)
		}
	}
}

// TestLineTooLongFailsAtOnce: a line over MaxLineBytes fails the job at
// once, with no restart, with an error naming the file, the line's offset
// and the flag that raises the limit.
func TestLineTooLongFailsAtOnce(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a b\n"+strings.Repeat("x", 101)+"\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var attempts int
	env, err := Build(Options{
		Input: in, Output: filepath.Join(dir, "out"), MaxLineBytes: 100, Parallelism: 1,
		Checkpoint: weir.CheckpointConfig{Mode: weir.ExactlyOnce, Interval: 10 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")},
		Restart:    weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 10},
		OnEvent: func(e weir.JobEvent) {
			if e.Kind == weir.EventRunning {
				attempts++
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = env.Execute(ctx)
	if !errors.Is(err, file.ErrLineTooLong) {
		t.Fatalf("job ended with %v; want ErrLineTooLong", err)
	}
	for _, w := range []string{in, "the line at byte 4", "--max-line-bytes"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%v does not say %q", err, w)
		}
	}
	if attempts != 1 {
		t.Fatalf("the job ran %d attempts; want 1: a line too long is there again after a restart", attempts)
	}
}
