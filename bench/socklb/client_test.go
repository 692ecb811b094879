package socklb

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The client: this test binary again, started by the benchmark in the client
// pod's namespace and in its row's cgroup with clientEnv set. It reads
// commands, one a line, runs each as a slice of load, prints a clientResult
// as JSON a line, and exits when its stdin closes; it never runs tests.
//
//	conn N        N new connections, one at a time
//	keepalive D   requests for D on the -workers keep-alive connections
//	              (opened at the first such command, kept to the end)
const (
	clientEnv  = "SVCP_SOCKLB_BENCH_CLIENT"
	dstEnv     = "SVCP_SOCKLB_BENCH_DST" // host:port
	workersEnv = "SVCP_SOCKLB_BENCH_WORKERS"
)

// msgSize is the request's and the answer's size: a small RPC.
const msgSize = 64

// clientResult is what the client measured in one slice, from its first
// connect or request to its last answer, and the client namespace's TCP
// counters over that time.
type clientResult struct {
	Ops        int     `json:"ops"` // connections (conn) or requests (keepalive)
	Seconds    float64 `json:"seconds"`
	SynRetrans int64   `json:"syn_retrans"`
	Resets     int64   `json:"resets"`
}

func TestMain(m *testing.M) {
	if os.Getenv(clientEnv) != "" {
		if err := runClient(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	flag.Parse()
	os.Exit(m.Run())
}

func runClient(in io.Reader, out io.Writer) error {
	dst := os.Getenv(dstEnv)
	workers, err := strconv.Atoi(os.Getenv(workersEnv))
	if err != nil || workers < 1 {
		return fmt.Errorf("%s=%q: not a count >= 1", workersEnv, os.Getenv(workersEnv))
	}
	var keep []net.Conn // the keep-alive connections
	defer func() {
		for _, c := range keep {
			c.Close()
		}
	}()
	enc := json.NewEncoder(out)
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		verb, arg, _ := strings.Cut(lines.Text(), " ")
		before, err := readTCPStats()
		if err != nil {
			return err
		}
		start := time.Now()
		var ops int
		switch verb {
		case "conn":
			n, err := strconv.Atoi(arg)
			if err != nil || n < 1 {
				return fmt.Errorf("%q: not a count >= 1", lines.Text())
			}
			if ops, err = newConnections(dst, n); err != nil {
				return err
			}
		case "keepalive":
			d, err := time.ParseDuration(arg)
			if err != nil {
				return fmt.Errorf("%q: %w", lines.Text(), err)
			}
			for len(keep) < workers {
				c, err := net.DialTimeout("tcp4", dst, 5*time.Second)
				if err != nil {
					return err
				}
				keep = append(keep, c)
			}
			start = time.Now() // the slice is the requests, not the dials
			if ops, err = keepAlive(keep, d); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%q: want conn N or keepalive D", lines.Text())
		}
		elapsed := time.Since(start)
		after, err := readTCPStats()
		if err != nil {
			return err
		}
		d := after.sub(before)
		if err := enc.Encode(clientResult{Ops: ops, Seconds: elapsed.Seconds(), SynRetrans: d.SynRetrans, Resets: d.OutRsts}); err != nil {
			return err
		}
	}
	return lines.Err()
}

// newConnections makes n connections to dst one at a time: connect, one
// request, its answer, close. The client closes first, so the TIME_WAIT
// sockets are the client's, which never reuses a port that has one.
func newConnections(dst string, n int) (int, error) {
	req, ans := make([]byte, msgSize), make([]byte, msgSize)
	for i := range n {
		c, err := net.DialTimeout("tcp4", dst, 5*time.Second)
		if err != nil {
			return i, err
		}
		err = exchange(c, req, ans)
		c.Close()
		if err != nil {
			return i, err
		}
	}
	return n, nil
}

// keepAlive sends requests on each of conns, one after another (the next
// when the answer is in), for d, and returns the requests answered in all.
func keepAlive(conns []net.Conn, d time.Duration) (int, error) {
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
	req, ans := make([]byte, msgSize), make([]byte, msgSize)
	n := 0
	for time.Now().Before(deadline) {
		if err := exchange(c, req, ans); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func exchange(c net.Conn, req, ans []byte) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	_, err := io.ReadFull(c, ans)
	return err
}

// answer is the server's side of both loads: an answer to every request,
// until the client closes.
func answer(c net.Conn) {
	defer c.Close()
	buf := make([]byte, msgSize)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return // EOF: the client is done
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// tcpStats are the client namespace's TCP counters that tell a stalled
// connection from a slow one: a SYN that gets no answer costs a 1 s
// retransmission timeout (RFC 6298's initial RTO).
type tcpStats struct {
	SynRetrans int64 // TcpExt TCPSynRetrans: SYNs sent again
	OutRsts    int64 // Tcp OutRsts: resets sent
}

func (s tcpStats) sub(o tcpStats) tcpStats {
	return tcpStats{s.SynRetrans - o.SynRetrans, s.OutRsts - o.OutRsts}
}

// readTCPStats reads the counters of the process's network namespace (the
// client runs wholly inside the client pod's).
func readTCPStats() (tcpStats, error) {
	snmp, err := procCounters("/proc/self/net/snmp", "Tcp")
	if err != nil {
		return tcpStats{}, err
	}
	ext, err := procCounters("/proc/self/net/netstat", "TcpExt")
	if err != nil {
		return tcpStats{}, err
	}
	return tcpStats{SynRetrans: ext["TCPSynRetrans"], OutRsts: snmp["OutRsts"]}, nil
}

// procCounters parses the "Prefix: name name ..." / "Prefix: value value ..."
// line pair of /proc/net/snmp or /proc/net/netstat (as bench/iptables does).
func procCounters(path, prefix string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tcp counters: %w", err)
	}
	var names []string
	for line := range strings.Lines(string(b)) {
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
