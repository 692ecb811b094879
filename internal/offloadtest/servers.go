package offloadtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// ServeTCP runs, in each backend, a server that answers every connection with
// "b<i> <client address>" and closes it.
func (l *Lab) ServeTCP(t *testing.T, port uint16) {
	t.Helper()
	for i, b := range l.Backends {
		ln := listen(t, b, port)
		go tcpIdentServer(ln, fmt.Sprintf("b%d", i))
	}
}

// listen listens on port in ns, on every address of both families, until the
// test ends.
func listen(t *testing.T, ns *netnstest.NS, port uint16) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() }) // stops the server
	return ln
}

// tcpIdentServer is a backend: it tells each client who answered and whom it saw.
func tcpIdentServer(ln net.Listener, name string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr().(*net.TCPAddr).IP)
		c.Close()
	}
}

// ServeUDP runs, in each backend, a server that answers every datagram with
// "b<i> <the datagram>".
func (l *Lab) ServeUDP(t *testing.T, port uint16) {
	t.Helper()
	for i, b := range l.Backends {
		var pc net.PacketConn
		if err := b.Do(func() (err error) {
			pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() }) // stops udpIdentServer
		go udpIdentServer(pc, fmt.Sprintf("b%d", i))
	}
}

func udpIdentServer(pc net.PacketConn, name string) {
	buf := make([]byte, 512)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		_, _ = pc.WriteTo([]byte(name+" "+string(buf[:n])), from) // "b1 who-3": who answered which question
	}
}

// Answer is what a backend of ServeTCP said: its name and the client address it saw.
type Answer struct{ Backend, Client string }

// Dial makes n TCP connections from ns to dst and returns the answers.
func Dial(ns *netnstest.NS, dst string, n int) ([]Answer, error) {
	var out []Answer
	err := ns.Do(func() error {
		for range n {
			c, err := net.DialTimeout("tcp", dst, 3*time.Second)
			if err != nil {
				return err
			}
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil {
				return fmt.Errorf("read from %s: %w", dst, err)
			}
			f := strings.Fields(line)
			if len(f) != 2 {
				return fmt.Errorf("answer %q", line)
			}
			out = append(out, Answer{f[0], f[1]})
		}
		return nil
	})
	return out, err
}

// UDPClient is a UDP socket in a namespace with a fixed source port, so that
// all its datagrams are one conntrack flow.
type UDPClient struct {
	c   net.Conn
	seq int
}

// NewUDPClient connects a UDP socket in ns to dst until the test ends.
func NewUDPClient(t *testing.T, ns *netnstest.NS, dst string) *UDPClient {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.Dial("udp", dst)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &UDPClient{c: c}
}

// Ask sends a numbered question and returns the backend that answered it. An
// answer to an earlier question (one that was asked again after a timeout,
// and answered twice) is skipped: it says where the flow went then, not now.
func (u *UDPClient) Ask() (string, error) {
	buf := make([]byte, 64)
	for range 5 { // UDP: a datagram may be lost; the flow is what matters
		u.seq++
		q := fmt.Sprintf("who-%d", u.seq)
		if _, err := u.c.Write([]byte(q)); err != nil {
			return "", err
		}
		_ = u.c.SetReadDeadline(time.Now().Add(time.Second))
		for {
			n, err := u.c.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				return "", err
			}
			if name, ans, ok := strings.Cut(string(buf[:n]), " "); ok && ans == q {
				return name, nil
			}
		}
	}
	return "", errors.New("no answer")
}

// ServeEcho runs, in each backend, a server that greets each connection with
// "b<i>" on a line, then echoes it until the client closes.
func (l *Lab) ServeEcho(t *testing.T, port uint16) {
	t.Helper()
	for i, b := range l.Backends {
		ln := listen(t, b, port)
		var conns sync.WaitGroup
		t.Cleanup(func() { ln.Close(); conns.Wait() })
		go echoServer(ln, fmt.Sprintf("b%d", i), &conns)
	}
}

func echoServer(ln net.Listener, name string, conns *sync.WaitGroup) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		conns.Go(func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute)) // a forgotten connection does not hang cleanup
			fmt.Fprintf(c, "%s\n", name)
			_, _ = io.Copy(c, c)
		})
	}
}

// DialEcho connects from the client to dst and returns the connection and the
// backend that answered.
func (l *Lab) DialEcho(t *testing.T, dst string) (net.Conn, string) {
	t.Helper()
	var c net.Conn
	if err := l.Client.Do(func() (err error) { c, err = net.DialTimeout("tcp", dst, 3*time.Second); return err }); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		t.Fatalf("greeting from %s: %v", dst, err)
	}
	return c, strings.TrimSpace(line)
}

// EchoLine writes msg on c and expects it back.
func EchoLine(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(got) != msg {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}
