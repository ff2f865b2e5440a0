package etcdtest

import (
	"net"
	"testing"
)

// TestStartTriesOtherPorts: the first port handed out is taken (as
// another process may take a port found free before etcd binds it); the
// member exits saying so, and the cluster starts on other ports.
func TestStartTriesOtherPorts(t *testing.T) {
	if Bin() == "" {
		t.Skip("etcd is not installed: apt-get install -y etcd-server")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free := freeAddr
	t.Cleanup(func() { freeAddr = free })
	calls := 0
	freeAddr = func(t testing.TB, host string) string {
		if calls++; calls == 1 {
			return taken.Addr().String()
		}
		return free(t, host)
	}
	c := Start(t, 1)
	// The client's and peer's ports, twice; more when another test took
	// a port found free on a loaded machine too (go test ./... saw 6).
	if calls < 4 || calls%2 != 0 {
		t.Fatalf("%d ports handed out, want 4 or more in pairs (a second try)", calls)
	}
	if c.Members[0].ClientURL == "http://"+taken.Addr().String() {
		t.Fatalf("the member's client URL is still the taken port's")
	}
}
