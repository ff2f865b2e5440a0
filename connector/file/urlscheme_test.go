package file

import (
	"net/url"
	"testing"
)

func TestURLScheme(t *testing.T) {
	for s, want := range map[string]string{
		"kafka://h/t":      "kafka",
		"Kafka://h/t":      "kafka",
		"kafka:/h":         "kafka",
		"mysql://x/y":      "mysql",
		"s3:bucket":        "s3",
		"git+ssh://h/r":    "git+ssh",
		"out-12:30":        "out-12",
		"books/*.txt":      "",
		"/tmp/a:b":         "",
		"./mysql://x/y":    "",
		"2026-01-01T10:00": "",
		":x":               "",
		"-":                "",
		"":                 "",
		"x":                "",
	} {
		got, ok := URLScheme(s)
		if got != want || ok != (want != "") {
			t.Errorf("URLScheme(%q) = %q, %v; want %q", s, got, ok, want)
		}
	}
}

// FuzzURLScheme: URLScheme finds the scheme url.Parse finds.
func FuzzURLScheme(f *testing.F) {
	for _, s := range []string{"kafka://h/t", "Kafka:/h", "books/*.txt", "a+b-c.d:x", "1a:b", ":x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		scheme, ok := URLScheme(s)
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		if u.Scheme != scheme || ok != (u.Scheme != "") {
			t.Fatalf("URLScheme(%q) = %q, %v; url.Parse says %q", s, scheme, ok, u.Scheme)
		}
	})
}
