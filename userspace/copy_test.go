package userspace

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// TestTCPManyMessagesThenFIN is the case the copy loop's parking must get
// right: a connection that carries many small messages (so each direction has
// turned TCP_INQ on and parks without a read that finds nothing), then a
// last reply with the backend's FIN right behind it. The client must get the
// reply and the end of the stream, not wait forever, and the byte counters
// must count every byte.
func TestTCPManyMessagesThenFIN(t *testing.T) {
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", func(_ string, c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if line == "bye\n" {
				io.WriteString(c, "bye\n") // the FIN follows at once (the handler returns, c closes)
				return
			}
			io.WriteString(c, "re: "+line)
		}
	})
	p := startProxier(t, Config{})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, be.addr.String())))
	c, err := net.Dial("tcp4", listenerAddr(t, p, "default/web:http"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang fails the test instead of stalling it

	r := bufio.NewReader(c)
	var sent, received int
	for i := range 20 {
		msg := fmt.Sprintf("message %d\n", i)
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		reply, err := r.ReadString('\n')
		if want := "re: " + msg; err != nil || reply != want {
			t.Fatalf("reply %d: %q (%v), want %q", i, reply, err, want)
		}
		sent, received = sent+len(msg), received+len(reply)
	}
	io.WriteString(c, "bye\n")
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "bye\n" {
		t.Fatalf("after bye: %q (%v), want \"bye\\n\" and the end of the stream", rest, err)
	}
	sent, received = sent+4, received+4
	name := portName("default/web", "http", service.TCP)
	eventually(t, "the counters count every byte", func() bool {
		c := p.Stats()[name]
		return c.BytesFromClients == uint64(sent) && c.BytesToClients == uint64(received)
	})
}

// TestReadInq checks what the copy loop relies on: with TCP_INQ on, a read
// reports what is still queued, 0 only when no byte and no FIN is; without
// it, the kernel says nothing (-1).
func TestReadInq(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	// read waits until conn is readable, then reads once into a 1-byte buffer.
	h := &halfCopy{buf: &[]byte{0}}
	read := func() (n, inq int) {
		t.Helper()
		var errno syscall.Errno
		err := rc.Read(func(fd uintptr) bool {
			n, inq, errno = h.read(fd)
			return errno != syscall.EAGAIN
		})
		if errno != 0 {
			err = errors.Join(err, errno)
		}
		if err != nil {
			t.Fatal(err)
		}
		return n, inq
	}

	io.WriteString(peer, "ab") // one segment: both bytes are there once one is
	if n, inq := read(); n != 1 || inq != -1 {
		t.Fatalf("without TCP_INQ: read %d, inq %d; want 1, -1", n, inq)
	}
	if err := rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_INQ, 1) }); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Skipf("TCP_INQ (Linux 4.18): %v", err)
	}
	if n, inq := read(); n != 1 || inq != 0 {
		t.Fatalf("the last byte queued: read %d, inq %d; want 1, 0", n, inq)
	}
	io.WriteString(peer, "cd")
	if n, inq := read(); n != 1 || inq != 1 {
		t.Fatalf("one of two bytes: read %d, inq %d; want 1, 1", n, inq)
	}
	peer.Close()
	n, inq := read()
	if n != 1 || inq < 1 {
		t.Fatalf("the last byte with the FIN behind it: read %d, inq %d; want 1, at least 1", n, inq)
	}
	if n, inq := read(); n != 0 {
		t.Fatalf("after the FIN: read %d (inq %d), want 0", n, inq)
	}
}
