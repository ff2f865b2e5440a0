package kafka

import (
	"slices"
	"strings"
	"testing"
)

// TestParseURLIsStrict: a malformed query, an option given twice, an empty
// broker or topic, a topic name Kafka refuses, credentials and a fragment
// are errors that name the URL and the part at fault; the scheme is taken
// in any case.
func TestParseURLIsStrict(t *testing.T) {
	for _, c := range []struct {
		url, want string
	}{
		{"kafka://h:9092/t?bounded=true;start=earliest", "invalid semicolon separator"},
		{"kafka://h:9092/t?group=a%zz", "invalid URL escape"},
		{"kafka://h:9092/t?bounded=true&bounded=false", "option bounded given 2 times"},
		{"kafka://h:9092/t?boundd=true", `unknown option "boundd"`},
		{"kafka://h:9092/a,,b", `topic "": empty name`},
		{"kafka://h:9092/a;b", `topic "a;b": character ';'`},
		{"kafka://h:9092/a/b", `topic "a/b": character '/'`},
		{"kafka://h:9092/" + strings.Repeat("t", 250), "250 characters"},
		{"kafka://h:9092/..", `topic "..": Kafka refuses`},
		{"kafka://h1:9092,,h2:9092/t", `broker "": no host`},
		{"kafka://h1:x,h2:9092/t", `broker "h1:x": port "x"`},
		{"kafka://:9092/t", `broker ":9092": no host`},
		{"kafka://user:secret@h:9092/t", "credentials in the URL are not supported"},
		{"kafka://h:9092/t#frag", "a fragment"},
		{"kafka://h:9092/t?group=g#", "a fragment"},
		{"kafka:/h:9092/t", "want kafka://host:port/topic"},
		{"kafka:h:9092/t", "want kafka://host:port/topic"},
		{"http://h:9092/t", "want kafka://host:port/topic"},
		{"kafka://h:9092", "no topic"},
	} {
		_, err := ParseURL(c.url)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.url) {
			t.Errorf("ParseURL(%q) = %v; want an error naming the URL and saying %q", c.url, err, c.want)
		}
	}
	for _, c := range []struct {
		url             string
		brokers, topics []string
		regex, bounded  string
	}{
		{"Kafka://h1:9092,h2:9093/lines,other?bounded=true", []string{"h1:9092", "h2:9093"}, []string{"lines", "other"}, "", "true"},
		{"KAFKA://[::1]:9092/A.b_c-9", []string{"[::1]:9092"}, []string{"A.b_c-9"}, "", ""},
		{"kafka://h:9092?regex=li.%2A", []string{"h:9092"}, nil, "li.*", ""},
	} {
		u, err := ParseURL(c.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", c.url, err)
			continue
		}
		if !slices.Equal(u.Brokers, c.brokers) || !slices.Equal(u.Topics, c.topics) || u.Query.Get("regex") != c.regex || u.Query.Get("bounded") != c.bounded {
			t.Errorf("ParseURL(%q) = %+v", c.url, u)
		}
	}
}

// FuzzParseURL: ParseURL never panics, and what it accepts has brokers, a
// topic or a regex, valid topic names and each option once.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"kafka://h:9092/t", "kafka://h1:9092,h2/a,b?bounded=true&start=earliest", "kafka://h/t?x=1;y=2", "Kafka://h?regex=a.*", "kafka:/h/t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseURL(s)
		if err != nil {
			return
		}
		if len(u.Brokers) == 0 || len(u.Topics) == 0 && u.Query.Get("regex") == "" {
			t.Fatalf("ParseURL(%q) = %+v: no broker, or no topic", s, u)
		}
		for _, tp := range u.Topics {
			if err := checkTopicName(tp); err != nil {
				t.Fatalf("ParseURL(%q) accepted topic %q: %v", s, tp, err)
			}
		}
		for opt, vs := range u.Query {
			if len(vs) != 1 || !slices.Contains(urlOptions, opt) {
				t.Fatalf("ParseURL(%q) accepted option %s=%q", s, opt, vs)
			}
		}
	})
}
