package tcpload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MsgSize is the request's and the answer's size: a small RPC.
const MsgSize = 64

// whoPrefix starts a request that asks for the server's local address.
const whoPrefix = '?'

// DialTimeout bounds each connect of the loads.
const DialTimeout = 5 * time.Second

// Serve answers every connection ln accepts (Answer) until ln is closed.
func Serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go Answer(c) // ends when the client closes
	}
}

// Answer is the server's side of both loads: an answer to every request,
// until the client closes. A request starting with '?' is answered with
// the connection's local address, any other with itself.
func Answer(c net.Conn) {
	defer c.Close()
	buf := make([]byte, MsgSize)
	who := make([]byte, MsgSize)
	copy(who, c.LocalAddr().String())
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return // EOF: the client is done
		}
		ans := buf
		if buf[0] == whoPrefix {
			ans = who
		}
		if _, err := c.Write(ans); err != nil {
			return
		}
	}
}

// Exchange sends one request on c and reads its answer into ans.
func Exchange(c net.Conn, req, ans []byte) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	_, err := io.ReadFull(c, ans)
	return err
}

// Who connects with dial, asks which address the server's socket has, and
// closes: behind a Service, the endpoint the proxy chose for this
// connection.
func Who(dial func() (net.Conn, error)) (string, error) {
	c, err := dial()
	if err != nil {
		return "", err
	}
	defer c.Close()
	req, ans := make([]byte, MsgSize), make([]byte, MsgSize)
	req[0] = whoPrefix
	if err := Exchange(c, req, ans); err != nil {
		return "", err
	}
	return string(bytes.TrimRight(ans, "\x00")), nil
}

// NewConnections makes n connections to dst one at a time: connect, one
// request, its answer, close.
func NewConnections(dst string, n int) (int, error) {
	req, ans := make([]byte, MsgSize), make([]byte, MsgSize)
	for i := range n {
		c, err := net.DialTimeout("tcp4", dst, DialTimeout)
		if err != nil {
			return i, err
		}
		err = Exchange(c, req, ans)
		c.Close()
		if err != nil {
			return i, err
		}
	}
	return n, nil
}

// Dial opens n connections to dst for KeepAlive.
func Dial(dst string, n int) ([]net.Conn, error) {
	var conns []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp4", dst, DialTimeout)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// KeepAlive sends requests on each of conns, one after another (the next
// when the answer is in), for d, and returns the requests answered in all.
func KeepAlive(conns []net.Conn, d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	counts, errs := make([]int, len(conns)), make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { counts[i], errs[i] = requestLoop(c, deadline) })
	}
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	return total, errors.Join(errs...)
}

// requestLoop is one keep-alive worker: requests until deadline.
func requestLoop(c net.Conn, deadline time.Time) (int, error) {
	req, ans := make([]byte, MsgSize), make([]byte, MsgSize)
	n := 0
	for time.Now().Before(deadline) {
		if err := Exchange(c, req, ans); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// TCPStats are the TCP counters of a network namespace that tell a stalled
// connection from a slow one: a SYN that gets no answer costs a 1 s
// retransmission timeout (RFC 6298's initial RTO).
type TCPStats struct {
	SynRetrans int64 // TcpExt TCPSynRetrans: SYNs sent again
	OutRsts    int64 // Tcp OutRsts: resets sent
}

// Sub is s - o, counter by counter.
func (s TCPStats) Sub(o TCPStats) TCPStats {
	return TCPStats{s.SynRetrans - o.SynRetrans, s.OutRsts - o.OutRsts}
}

// ReadTCPStats reads the counters of the calling process's network
// namespace (a client that runs wholly inside one).
func ReadTCPStats() (TCPStats, error) {
	snmp, err := procCounters("/proc/self/net/snmp", "Tcp")
	if err != nil {
		return TCPStats{}, err
	}
	ext, err := procCounters("/proc/self/net/netstat", "TcpExt")
	if err != nil {
		return TCPStats{}, err
	}
	return TCPStats{SynRetrans: ext["TCPSynRetrans"], OutRsts: snmp["OutRsts"]}, nil
}

// procCounters parses the "Prefix: name name ..." / "Prefix: value value ..."
// line pair of /proc/net/snmp or /proc/net/netstat.
func procCounters(path, prefix string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tcp counters: %w", err)
	}
	return parseCounters(string(b), prefix, path)
}

func parseCounters(text, prefix, path string) (map[string]int64, error) {
	var names []string
	for line := range strings.Lines(text) {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != prefix+":" {
			continue
		}
		if names == nil {
			names = fields[1:]
			continue
		}
		m := make(map[string]int64, len(names))
		for i, v := range fields[1:] {
			if i < len(names) {
				m[names[i]], _ = strconv.ParseInt(v, 10, 64) // MaxConn is -1: still parses
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("%s: no %q counters", path, prefix)
}
