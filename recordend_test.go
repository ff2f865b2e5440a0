package weir

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/etcdtest"
	"github.com/weirstream/weir/internal/ha"
)

// muteProxy forwards TCP to etcd. Once armed, the first client write that
// holds marker is forwarded (etcd applies it), but etcd's answers on that
// connection are dropped from then on; the connection closes after hold.
type muteProxy struct {
	ln     net.Listener
	marker []byte
	hold   time.Duration
	armed  atomic.Bool
	hits   atomic.Int32
	mu     sync.Mutex
	conns  []net.Conn
}

func newMuteProxy(t *testing.T, target, marker string, hold time.Duration) *muteProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &muteProxy{ln: ln, marker: []byte(marker), hold: hold}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			var mute atomic.Bool
			go func() { // up
				defer c.Close()
				defer s.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if bytes.Contains(buf[:n], p.marker) && p.armed.CompareAndSwap(true, false) {
							p.hits.Add(1)
							mute.Store(true)
							time.AfterFunc(p.hold, func() { c.Close(); s.Close() })
						}
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { // down
				defer c.Close()
				defer s.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && !mute.Load() {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil && err != io.EOF {
						return
					}
					if err == io.EOF {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

// TestRecordEndReadsBackAfterItsDeadline: an end whose answer arrives
// after End's retries ran out of time is read back with a context of its
// own, and counts as recorded. A review (session 36) found the read-back
// used the spent context, and an end etcd held was reported as not
// recorded ("a standby runs it on").
func TestRecordEndReadsBackAfterItsDeadline(t *testing.T) {
	e := etcdtest.Start(t, 1)
	const prefix = "/s36b"
	p := newMuteProxy(t, e.Hosts()[0], prefix+"/jobs/job/ended", 2500*time.Millisecond)
	c, err := ha.Dial(ha.Config{Endpoints: []string{p.ln.Addr().String()}, Prefix: prefix, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	direct, err := ha.Dial(ha.Config{Endpoints: e.Hosts(), Prefix: prefix, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Campaign(ctx, "job", "a")
	if err != nil {
		t.Fatal(err)
	}
	p.armed.Store(true)
	endErr := recordEnd(l, ha.Finished, slog.New(slog.DiscardHandler))
	if p.hits.Load() == 0 {
		t.Skip("the write of the end did not pass the proxy")
	}
	got, err := direct.Ended(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recordEnd: %v; etcd's end: %q", endErr, got.Outcome)
	if got.Outcome == ha.Finished && endErr != nil {
		t.Fatalf("etcd recorded the end (%q), yet recordEnd reports it not recorded: %v", got.Outcome, endErr)
	}
}
