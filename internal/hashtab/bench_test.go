package hashtab

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/weirstream/weir/internal/keygroup"
)

// The word count's access to its keyed state, as heap value state makes
// it today and as it could with a Table: per record, make the word's key
// group current, find the word's count in the group's table and add one.
// 2,000 words over 128 key groups, in the order of the benchmark corpus
// (wordcount.WriteBenchCorpus); the words looked up are copies, not the
// table's own strings, as Split's words are. The hashes are computed
// outside the timed loop: a record carries its routing hash.

type wcRecord struct {
	word  string
	hash  uint64
	group int
}

func wcRecords() []wcRecord {
	var recs []wcRecord
	for i := range 1000 {
		for k := range 8 {
			w := strings.Clone(fmt.Sprint("word", (i*7+k*131)%2000))
			h := xxhash.Sum64String(w)
			recs = append(recs, wcRecord{w, h, keygroup.Of(h, keygroup.DefaultMaxParallelism)})
		}
	}
	return recs
}

// entry is a count as heap value state keeps it: the value, the epoch it
// was written in, the table's own copy of the key.
type entry struct {
	v     int64
	epoch uint64
	key   string
}

func BenchmarkWordCountState(b *testing.B) {
	recs := wcRecords()
	b.Run("map", func(b *testing.B) {
		groups := make([]map[string]*entry, keygroup.DefaultMaxParallelism)
		for i := range groups {
			groups[i] = map[string]*entry{}
		}
		for i := 0; b.Loop(); i++ {
			r := &recs[i%len(recs)]
			m := groups[r.group]
			e := m[r.word]
			if e == nil {
				e = &entry{key: strings.Clone(r.word)}
				m[e.key] = e
			}
			e.v++
		}
	})
	b.Run("table", func(b *testing.B) {
		groups := make([]Table[string, *entry], keygroup.DefaultMaxParallelism)
		for i := 0; b.Loop(); i++ {
			r := &recs[i%len(recs)]
			t := &groups[r.group]
			e, _ := t.Get(r.hash, r.word)
			if e == nil {
				e = &entry{key: strings.Clone(r.word)}
				t.Put(r.hash, e.key, e)
			}
			e.v++
		}
	})
}

// BenchmarkLookup is one lookup of a present string key among 2,000.
func BenchmarkLookup(b *testing.B) {
	recs := wcRecords()
	b.Run("map", func(b *testing.B) {
		m := map[string]int64{}
		for _, r := range recs {
			m[strings.Clone(r.word)] = 1
		}
		var sum int64
		for i := 0; b.Loop(); i++ {
			sum += m[recs[i%len(recs)].word]
		}
		_ = sum
	})
	b.Run("table", func(b *testing.B) {
		var t Table[string, int64]
		for _, r := range recs {
			t.Put(r.hash, strings.Clone(r.word), 1)
		}
		var sum int64
		for i := 0; b.Loop(); i++ {
			r := &recs[i%len(recs)]
			v, _ := t.Get(r.hash, r.word)
			sum += v
		}
		_ = sum
	})
}
