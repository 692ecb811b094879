package userspace

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// plainCopy is the copy to read before halfCopy (copy.go): a proxy's TCP
// data path in its plainest form, as inetaf/tcpproxy writes it. One
// goroutine per direction copies with io.Copy until its source ends and
// passes the end on as a half-close (CloseWrite sends a FIN), so a client
// that half-closes after its request still gets the whole reply; when both
// directions are done, both sockets close. An error closes both at once: the
// other direction has nothing left to wait for.
//
// The Proxier keeps exactly these semantics (copyAndEnd). What halfCopy
// changes is what an open connection costs. io.Copy between two TCP
// connections splices (TCPConn.ReadFrom), and holds a pipe, two file
// descriptors, per direction for as long as the connection lives, idle or
// not; halfCopy parks holding nothing, reads what arrived into a pooled
// buffer inside the poller's callback, and splices only the bytes already
// queued. TestPlainCopy shows both.
func plainCopy(client, backend *net.TCPConn) {
	var wg sync.WaitGroup
	one := func(dst, src *net.TCPConn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			client.Close()
			backend.Close()
			return
		}
		dst.CloseWrite()
	}
	wg.Add(2)
	go one(backend, client)
	go one(client, backend)
	wg.Wait()
	client.Close()
	backend.Close()
}

// startPlainProxy serves plainCopy to backend on a loopback listener, until
// the test ends.
func startPlainProxy(t *testing.T, backend string) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		open []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp4", backend)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, b)
			mu.Unlock()
			wg.Go(func() { plainCopy(c.(*net.TCPConn), b.(*net.TCPConn)) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestPlainCopy puts plainCopy and the Proxier side by side in front of the
// same echo backend: both carry a request and its half-close, and the reply
// and its end of stream back; then it holds idle connections open through
// each and counts the files this process holds for them.
//
//	go test ./userspace -run 'TestPlainCopy$' -v
func TestPlainCopy(t *testing.T) {
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", echo)
	p := startProxier(t, Config{})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
	ways := []struct{ name, addr string }{
		{"plainCopy", startPlainProxy(t, be.addr.String())},
		{"Proxier  ", listenerAddr(t, p, "default/web:http")},
	}

	for _, w := range ways {
		c := dialEcho(t, w.addr, "a:")
		if _, err := io.WriteString(c, "hello"); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "hello" {
			t.Fatalf("%s: read %q after the half-close (%v), want %q and the end of stream", w.name, got, err, "hello")
		}
		t.Logf("%s: sent %q and a half-close; the echo came back, %q, then the end of stream", w.name, "hello", got)
	}

	const n = 50
	for _, w := range ways {
		dialEcho(t, w.addr, "a:") // warm up: the splice pipe pool has its pipes
		before := openFiles(t)
		for range n {
			dialEcho(t, w.addr, "a:")
		}
		grew := settledFiles(t) - before
		t.Logf("%s: %d idle connections, %d more open files in this process (%.0f each: the client's, the proxy's two and the backend's socket, and what the copy holds)",
			w.name, n, grew, float64(grew)/n)
		if w.name != "plainCopy" && grew > 5*n {
			t.Errorf("the Proxier's %d idle connections opened %d files, want about %d (4 per connection)", n, grew, 4*n)
		}
	}
}

// settledFiles counts this process's open files once the count has stopped
// changing: the copy goroutines of the connections just made have started.
func settledFiles(t *testing.T) int {
	t.Helper()
	last := openFiles(t)
	for range 100 {
		time.Sleep(20 * time.Millisecond)
		n := openFiles(t)
		if n == last {
			return n
		}
		last = n
	}
	t.Error(errors.New("the number of open files did not settle"))
	return last
}
