package dnsresolve

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestDrainListener: once draining, the listener accepts no more (a
// connection waiting in its queue stays there, for another descriptor of
// the same socket), a connection that has answered nothing still reads
// its query, and one that has answered reads no more.
func TestDrainListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newDrainListener(inner)
	defer l.Close()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	accept := func() net.Conn {
		t.Helper()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	fresh := dial()
	freshS := accept()
	dial()
	idleS := accept()
	if _, err := idleS.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	waiting := dial() // in the queue, not accepted

	l.drain()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept while draining: %v, want net.ErrClosed", err)
	}

	// miekg/dns sets a deadline before each read; the one that has not
	// answered keeps it and gets its query.
	_ = freshS.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := fresh.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(freshS, buf); err != nil || string(buf) != "query" {
		t.Errorf("the connection that had answered nothing: %q %v", buf, err)
	}
	_, _ = freshS.Write([]byte("answer"))
	_ = freshS.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := freshS.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("after its answer: %v, want no more reading", err)
	}
	_ = idleS.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idleS.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection that had answered: %v, want no more reading", err)
	}

	// Another descriptor of the socket, as a reload's next Server has,
	// accepts the connection that waited.
	f, err := inner.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	next, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	c, err := next.Accept()
	if err != nil {
		t.Fatalf("the next listener: %v", err)
	}
	defer c.Close()
	if _, err := waiting.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf[:1]); err != nil {
		t.Errorf("the connection that waited: %v", err)
	}
}
