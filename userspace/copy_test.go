package userspace

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"os"
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

func TestTCPLargeTransfer(t *testing.T) {
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", echo)
	p := startProxier(t, Config{})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
	c := dialEcho(t, listenerAddr(t, p, "default/web:http"), "a:")

	data := make([]byte, 8<<20)
	rand.Read(data)
	errc := make(chan error, 1)
	go func() { // writeRequest: the echo needs the reply read while we write
		_, err := c.Write(data)
		c.(*net.TCPConn).CloseWrite()
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("echoed %d bytes (%v), want the %d sent", len(got), err, len(data))
	}
	if c := p.Stats()[portName("default/web", "http", service.TCP)]; c.BytesFromClients != uint64(len(data)) {
		t.Errorf("bytes from clients %d, want %d", c.BytesFromClients, len(data))
	}
}

// TestIdleConnectionsHoldNoPipes checks proxyCopy's promise: an idle proxied
// connection costs the proxy its two sockets, not two more splice pipes.
func TestIdleConnectionsHoldNoPipes(t *testing.T) {
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", echo)
	p := startProxier(t, Config{})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
	addr := listenerAddr(t, p, "default/web:http")

	dialEcho(t, addr, "a:") // warm up: the splice pipe pool has its pipes
	before := openFiles(t)
	const n = 100
	for range n {
		dialEcho(t, addr, "a:")
	}
	// Each connection is 4 sockets in this process: the client's, the backend's,
	// and the proxy's two. Holding pipes would make it 8. Leave room for the
	// pipe pool (which the race detector makes leaky) to grow by a few pipes.
	if grew := openFiles(t) - before; grew > 5*n {
		t.Errorf("%d idle connections opened %d files, want about %d (4 per connection)", n, grew, 4*n)
	}
}

func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("counting open files needs /proc: %v", err)
	}
	return len(fds)
}
