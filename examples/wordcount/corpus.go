package wordcount

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WriteBenchCorpus writes the word count benchmarks' corpus into dir:
// files files (in-<f>.txt) of lines lines of 8 words over a 2,000-word
// vocabulary ("Word0"…"Word1999"). It returns how often each word, as
// Split lower-cases it, occurs: what Verify expects.
func WriteBenchCorpus(dir string, files, lines int) (map[string]int64, error) {
	want := map[string]int64{}
	for f := range files {
		var sb strings.Builder
		for i := range lines {
			for k := range 8 {
				if k > 0 {
					sb.WriteByte(' ')
				}
				n := (i*7 + k*131 + f) % 2000
				fmt.Fprintf(&sb, "Word%d", n)
				want[fmt.Sprint("word", n)]++
			}
			sb.WriteByte('\n')
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("in-%d.txt", f)), []byte(sb.String()), 0o644); err != nil {
			return nil, err
		}
	}
	return want, nil
}
