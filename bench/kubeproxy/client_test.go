package kubeproxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/bench/tcpload"
)

// The client: this test binary again, started by the benchmark in the
// client pod's network namespace (and, for the socket LB, born in the
// cgroup svcproxy attaches to) with clientEnv set. It reads requests, one
// JSON object a line, runs each in a goroutine of its own (probes overlap:
// a change is written while the probe of the one before still waits), and
// prints each one's reply as a JSON line, tagged with the request's id.
//
//	probe KIND DST [EP]   connect to DST again and again until KIND holds
//	                      (or For, 3 minutes without):
//	                      up (a connection is answered), down (refused or
//	                      dropped),
//	                      reach (the answer comes from endpoint EP), leave
//	                      (an answer comes from another endpoint than EP);
//	                      replies with the start of the attempt that saw it
//	conn DST N|FOR        N new connections, one at a time (tcpload), or
//	                      as many as fit in FOR
//	keepalive DST D       requests for D on Workers connections
const clientEnv = "SVCP_KPBENCH_CLIENT"

// request is one line to the client.
type request struct {
	ID      int           `json:"id"`
	Op      string        `json:"op"`             // probe, conn, keepalive
	Kind    string        `json:"kind,omitempty"` // probe: up, down, reach, leave
	Dst     string        `json:"dst"`
	EP      string        `json:"ep,omitempty"` // probe reach, leave: the endpoint's address
	N       int           `json:"n,omitempty"`  // conn
	For     time.Duration `json:"for,omitempty"`
	Workers int           `json:"workers,omitempty"` // keepalive
}

// probeLimit is how long a probe waits: For, or probeTimeout.
func (r request) probeLimit() time.Duration {
	if r.For > 0 {
		return r.For
	}
	return probeTimeout
}

// reply is the client's answer to one request.
type reply struct {
	ID  int    `json:"id"`
	Err string `json:"err,omitempty"`
	// probe: when the attempt that saw the change began (Unix ns), how many
	// attempts it took, and how many of them timed out (a SYN unanswered).
	Seen     int64 `json:"seen,omitempty"`
	Attempts int   `json:"attempts,omitempty"`
	Timeouts int   `json:"timeouts,omitempty"`
	// conn, keepalive: what the slice of load measured.
	Ops        int     `json:"ops,omitempty"`
	Seconds    float64 `json:"seconds,omitempty"`
	SynRetrans int64   `json:"syn_retrans,omitempty"`
}

// Probe pacing: an attempt every elapsed/probeSpread, within [probeMin,
// probeMax]: a probe sees a change within 1% of the time it waited (2 ms
// at least), about 260 attempts for a change seen after a second. Every
// attempt is a connection through the proxy's rules, or through hybrid's
// userspace proxy, whose CPU it then is: a denser probe would measure
// itself.
const (
	probeSpread   = 100
	probeMin      = 2 * time.Millisecond
	probeMax      = 25 * time.Millisecond
	probeDial     = time.Second
	probeInflight = 16
	probeTimeout  = 3 * time.Minute
)

// runClient serves requests from in until it closes.
func runClient(in io.Reader, out io.Writer) error {
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	send := func(r reply) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(r)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		var req request
		if err := json.Unmarshal(lines.Bytes(), &req); err != nil {
			return fmt.Errorf("request %q: %w", lines.Text(), err)
		}
		wg.Go(func() { send(serve(req)) })
	}
	return lines.Err()
}

// serve runs one request.
func serve(req request) reply {
	r := reply{ID: req.ID}
	var err error
	switch req.Op {
	case "probe":
		r, err = probe(req)
		r.ID = req.ID
	case "conn":
		err = slice(&r, func() (int, error) { return connections(req.Dst, req.N, req.For) }, func() {})
	case "keepalive":
		var conns []net.Conn
		if conns, err = tcpload.Dial(req.Dst, req.Workers); err == nil {
			err = slice(&r, func() (int, error) { return tcpload.KeepAlive(conns, req.For) }, func() {
				for _, c := range conns {
					c.Close()
				}
			})
		}
	default:
		err = fmt.Errorf("op %q: want probe, conn or keepalive", req.Op)
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// connections makes n new connections to dst one at a time, or as many
// as fit in d when d is not zero.
func connections(dst string, n int, d time.Duration) (int, error) {
	if d == 0 {
		return tcpload.NewConnections(dst, n)
	}
	total := 0
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		k, err := tcpload.NewConnections(dst, 20)
		total += k
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// slice measures one slice of load and the SYNs sent again meanwhile.
func slice(r *reply, load func() (int, error), done func()) error {
	defer done()
	before, err := tcpload.ReadTCPStats()
	if err != nil {
		return err
	}
	start := time.Now()
	ops, err := load()
	r.Ops, r.Seconds = ops, time.Since(start).Seconds()
	after, serr := tcpload.ReadTCPStats()
	r.SynRetrans = after.Sub(before).SynRetrans
	return errors.Join(err, serr)
}

// probe connects to req.Dst until req.Kind holds, or req.probeLimit(). An
// attempt starts every pacing interval while fewer than probeInflight are
// under way, each with a dial timeout of a second: where a rule drops the
// connection (kube-proxy's nftables mode drops traffic to a Service
// address no Service has), the attempts after it need not wait for it.
// The reply is the start of the earliest attempt that saw the change.
func probe(req request) (reply, error) {
	var r reply
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp4", req.Dst, probeDial) }
	type outcome struct {
		at   time.Time
		ok   bool
		who  string
		err  error
		done bool
	}
	results := make(chan outcome, probeInflight)
	inflight := 0
	var seen time.Time
	var last outcome
	begin := time.Now()
	next := begin
	for {
		if seen.IsZero() && inflight < probeInflight && !time.Now().Before(next) {
			at := time.Now()
			inflight++
			r.Attempts++
			go func() {
				who, err := tcpload.Who(dial)
				results <- outcome{at: at, ok: holds(req, who, err), who: who, err: err}
			}()
			elapsed := time.Since(begin)
			next = at.Add(min(max(elapsed/probeSpread, probeMin), probeMax))
		}
		if inflight == 0 && !seen.IsZero() {
			r.Seen = seen.UnixNano()
			return r, nil
		}
		if seen.IsZero() && time.Since(begin) > req.probeLimit() && inflight == 0 {
			return r, fmt.Errorf("probe %s %s %s: not seen in %s (last: %q, %v)", req.Kind, req.Dst, req.EP, req.probeLimit(), last.who, last.err)
		}
		wait := time.Until(next)
		if !seen.IsZero() || inflight >= probeInflight {
			wait = time.Hour // only an outcome can move things on
		}
		select {
		case o := <-results:
			inflight--
			last = o
			if isTimeout(o.err) {
				r.Timeouts++
			}
			if o.ok && (seen.IsZero() || o.at.Before(seen)) {
				seen = o.at
			}
		case <-time.After(max(wait, 0)):
		}
	}
}

// holds says whether an attempt's outcome (the answering endpoint, or the
// dial's error) is what the probe waits for.
func holds(req request, who string, err error) bool {
	switch req.Kind {
	case "up":
		return err == nil
	case "down":
		// Refused by the backend at the Service address itself, or
		// dropped: kube-proxy's nftables mode drops what goes to an
		// address of the service range that no Service has.
		return errors.Is(err, syscall.ECONNREFUSED) || isTimeout(err)
	case "reach":
		return err == nil && hostOf(who) == req.EP
	case "leave":
		return err == nil && hostOf(who) != req.EP
	}
	return false
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// client is the benchmark's end of one client process.
type client struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	stderr strings.Builder

	mu      sync.Mutex
	nextID  int
	waiting map[int]chan reply
	err     error // set when the client's output ended
}

// startClient starts cmd (this binary, in the client's namespace) as the
// client; it exits when close closes its stdin.
func startClient(t testing.TB, cmd *exec.Cmd) *client {
	t.Helper()
	c := &client{cmd: cmd, waiting: map[int]chan reply{}}
	cmd.Env = append(os.Environ(), clientEnv+"=1")
	cmd.Stderr = &c.stderr
	var err error
	if c.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the client: %v", err)
	}
	go c.read(stdout)
	return c
}

// read is the goroutine that hands each reply to its waiter; it ends with
// the client's output.
func (c *client) read(out io.Reader) {
	dec := json.NewDecoder(out)
	for {
		var r reply
		err := dec.Decode(&r)
		c.mu.Lock()
		if err != nil {
			c.err = fmt.Errorf("the client ended: %v: %s", err, c.stderr.String())
			for _, ch := range c.waiting {
				close(ch)
			}
			c.waiting = nil
			c.mu.Unlock()
			return
		}
		ch := c.waiting[r.ID]
		delete(c.waiting, r.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// send sends req and returns the channel its reply comes on (closed
// without one if the client ends).
func (c *client) send(req request) (<-chan reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	c.nextID++
	req.ID = c.nextID
	ch := make(chan reply, 1)
	c.waiting[req.ID] = ch
	b, _ := json.Marshal(req)
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		delete(c.waiting, req.ID)
		return nil, fmt.Errorf("the client: %w", err)
	}
	return ch, nil
}

// do sends req and waits for its reply.
func (c *client) do(req request) (reply, error) {
	ch, err := c.send(req)
	if err != nil {
		return reply{}, err
	}
	r, ok := <-ch
	if !ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		return reply{}, c.err
	}
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}

// close ends the client: stdin closed, then a wait of up to 30 s.
func (c *client) close() error {
	c.in.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("the client: %v: %s", err, c.stderr.String())
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
		return errors.New("the client did not exit within 30 s of its stdin closing")
	}
}
