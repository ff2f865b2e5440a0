package cluster

import (
	"fmt"
	"net/http"
	"unicode/utf8"

	"connectrpc.com/connect"
)

// Limits of the control plane. Every message a process reads from the
// control plane is bounded, so a peer holding a certificate of the
// cluster cannot make it read or hold more; every string a peer sent is
// clipped before it is echoed in an error or a log.
const (
	// maxMessageBytes bounds a control-plane message, either way. The
	// largest are reports of a checkpoint's handles, which the workers
	// batch below it.
	maxMessageBytes = 16 << 20
	// maxNameBytes bounds a worker's name: a DNS name's length, as a
	// certificate holds it as one.
	maxNameBytes = 253
	// maxEchoBytes is how much of a string a peer sent an error or a log
	// repeats.
	maxEchoBytes = 64
	// maxErrorBytes bounds the text of a task's failure a worker reports.
	maxErrorBytes = 4 << 10
	// maxRunIDBytes bounds the run id of a deploy, which sinks write into
	// their ownership records; the runtime draws 26.
	maxRunIDBytes = 64
	// maxCopies bounds the local copies a worker's registration or
	// heartbeat lists (local.Store.Copies lists as many at most).
	maxCopies = 4096
)

// rpcOptions are the Connect options of every handler and client of the
// control plane: they bound the messages it reads, and send a message
// compressed only from compressMinBytes. Connect gzips every response a
// client accepts gzip for, and its pooled compressor's reset alone cost a
// coordinator more CPU than its handlers' work (note 118); the control
// plane's messages are a few hundred bytes.
var rpcOptions = connect.WithOptions(connect.WithReadMaxBytes(maxMessageBytes), connect.WithCompressMinBytes(compressMinBytes))

// compressMinBytes is the least message the control plane compresses (a
// deploy of a large graph, a profile).
const compressMinBytes = 64 << 10

// limitBody bounds what h reads of a request's body: Connect's own limit
// refuses a larger message but then reads the rest to its end.
func limitBody(h http.Handler) http.Handler {
	// NB: 5 bytes more for the envelope of the gRPC protocols.
	return http.MaxBytesHandler(h, maxMessageBytes+5)
}

// clip shortens a string a peer sent for an error or a log.
func clip(s string) string {
	return clipTo(s, maxEchoBytes)
}

func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:n], len(s))
}

func errNameTooLong(name string) error {
	return fmt.Errorf("cluster: a worker name of %d bytes (%q): names are at most %d bytes; choose a shorter --name", len(name), clip(name), maxNameBytes)
}
