package socklb

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/bench/tcpload"
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
		before, err := tcpload.ReadTCPStats()
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
			if ops, err = tcpload.NewConnections(dst, n); err != nil {
				return err
			}
		case "keepalive":
			d, err := time.ParseDuration(arg)
			if err != nil {
				return fmt.Errorf("%q: %w", lines.Text(), err)
			}
			if keep == nil {
				if keep, err = tcpload.Dial(dst, workers); err != nil {
					return err
				}
			}
			start = time.Now() // the slice is the requests, not the dials
			if ops, err = tcpload.KeepAlive(keep, d); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%q: want conn N or keepalive D", lines.Text())
		}
		elapsed := time.Since(start)
		after, err := tcpload.ReadTCPStats()
		if err != nil {
			return err
		}
		d := after.Sub(before)
		if err := enc.Encode(clientResult{Ops: ops, Seconds: elapsed.Seconds(), SynRetrans: d.SynRetrans, Resets: d.OutRsts}); err != nil {
			return err
		}
	}
	return lines.Err()
}
