package pods

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// Target is what `svclab traffic` sends to: a name or address, a port, and
// how to talk to it.
type Target struct {
	Proto string // "http" or "udp"
	Host  string // a DNS name or an IP address
	Port  uint16
}

func (t Target) String() string {
	return t.Proto + "://" + net.JoinHostPort(t.Host, strconv.Itoa(int(t.Port)))
}

// ParseTarget reads "web", "web.default.svc.cluster.local",
// "198.18.0.20:80", "[2001:db8:18::24]:80", "http://web:80" or "udp://echo:7". Without a scheme it is
// HTTP; without a port, 80 (HTTP) or 7 (UDP).
func ParseTarget(s string) (Target, error) {
	t := Target{Proto: "http"}
	rest := s
	if scheme, after, ok := strings.Cut(s, "://"); ok {
		switch scheme {
		case "http", "tcp":
			t.Proto = "http"
		case "udp":
			t.Proto = "udp"
		default:
			return Target{}, fmt.Errorf("target %q: scheme %q: want http, tcp or udp", s, scheme)
		}
		rest = after
	}
	rest = strings.TrimSuffix(rest, "/")
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		// No port: the whole rest is the host.
		host, port = rest, "80"
		if t.Proto == "udp" {
			port = "7"
		}
	}
	if host == "" || strings.ContainsAny(host, "/ ") {
		return Target{}, fmt.Errorf("target %q: host %q: want a name or an IP address", s, host)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return Target{}, fmt.Errorf("target %q: port %q: want 1 to 65535", s, port)
	}
	t.Host, t.Port = host, uint16(n)
	return t, nil
}

// Event is one line of a probe's output (JSON): first the resolved address,
// then one line per request.
type Event struct {
	// Addr is the address the target resolved to (first line only).
	Addr string `json:"addr,omitempty"`
	Seq  int    `json:"seq,omitempty"`
	Pod  string `json:"pod,omitempty"`
	From string `json:"from,omitempty"`
	Err  string `json:"err,omitempty"`
	// At is when the request ended (answered or failed), in seconds since
	// the first one was sent: svclab traffic --timeline counts by it.
	At float64 `json:"at,omitempty"`
	// Held is set on the requests of a Probe's held connection (Hold): 1
	// before the first of the N, 2 after the last; Seq is then 0. Reused
	// says the request went over the connection the first one opened.
	Held   int  `json:"held,omitempty"`
	Reused bool `json:"reused,omitempty"`
}

// Probe sends N requests to a Target, each on a new connection (or, for UDP,
// from a new socket) so that the proxy chooses an endpoint for each one.
type Probe struct {
	Target Target
	N      int
	// Rate is requests per second; 0 sends each as soon as the last is answered.
	Rate float64
	// Timeout bounds one request (default 2s, times the slowdown of
	// topology.SlowdownEnv; twice that for a new TCP connection, see tcpTimeout).
	Timeout time.Duration
	// Resolver looks the name up; nil is the Go resolver reading
	// /etc/resolv.conf, which in a lab pod is the pod's own.
	Resolver *net.Resolver
	// Hold keeps one more connection open for the whole run (HTTP only): a
	// request on it before the first of the N and another after the last,
	// so that a path switch in between (a hybrid promotion, svclab mode)
	// shows whether an open connection survives it.
	Hold bool
	// IPv6 resolves a name to its IPv6 address (AAAA), not its IPv4 one (A),
	// as curl -6 does. An address target is used as it is.
	IPv6 bool
}

// Run resolves the target once, then sends the requests, writing one Event
// per line to w. A failed request is an Event with Err; only a failed lookup
// or a broken w ends Run early.
func (p *Probe) Run(ctx context.Context, w io.Writer) error {
	enc := json.NewEncoder(w)
	ip, err := p.resolve(ctx)
	if err != nil {
		_ = enc.Encode(Event{Err: err.Error()})
		return err
	}
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(int(p.Target.Port)))
	if err := enc.Encode(Event{Addr: addr}); err != nil {
		return err
	}
	var tick <-chan time.Time
	if p.Rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / p.Rate))
		defer t.Stop()
		tick = t.C
	}
	start := time.Now()
	var held *heldConn
	if p.Hold {
		if p.Target.Proto != "http" {
			return fmt.Errorf("target %s: a held connection needs HTTP", p.Target)
		}
		held = newHeldConn(addr)
		defer held.close()
		if err := enc.Encode(held.request(ctx, 1, p.timeout())); err != nil {
			return err
		}
	}
	for i := 1; i <= p.N; i++ {
		if tick != nil && i > 1 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick:
			}
		}
		ev := Event{Seq: i}
		a, err := p.once(ctx, addr)
		if err != nil {
			ev.Err = err.Error()
		} else {
			ev.Pod, ev.From = a.Pod, a.From
		}
		ev.At = time.Since(start).Seconds()
		if err := enc.Encode(ev); err != nil {
			return err
		}
	}
	if held != nil {
		ev := held.request(ctx, 2, p.timeout())
		ev.At = time.Since(start).Seconds()
		return enc.Encode(ev)
	}
	return nil
}

// heldConn is a Probe's held connection: an HTTP client that keeps at most
// one connection to addr alive between its requests.
type heldConn struct {
	addr string
	tr   *http.Transport
}

func newHeldConn(addr string) *heldConn {
	return &heldConn{addr: addr, tr: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}}
}

// request sends request n (1 or 2) on the held connection and says whether
// it went over the connection an earlier request opened. If that connection
// was closed, the transport dials a new one and Reused is false.
func (h *heldConn) request(ctx context.Context, n int, timeout time.Duration) Event {
	ev := Event{Held: n}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { ev.Reused = info.Reused },
	})
	u := url.URL{Scheme: "http", Host: h.addr, Path: "/"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		ev.Err = err.Error()
		return ev
	}
	resp, err := (&http.Client{Transport: h.tr}).Do(req)
	if err != nil {
		ev.Err = err.Error()
		return ev
	}
	defer resp.Body.Close()
	// Read the body to its end, or the connection cannot be used again.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		ev.Err = err.Error()
		return ev
	}
	line, _, _ := strings.Cut(string(body), "\n")
	a, err := ParseAnswer(line)
	if err != nil {
		ev.Err = err.Error()
		return ev
	}
	ev.Pod, ev.From = a.Pod, a.From
	return ev
}

func (h *heldConn) close() { h.tr.CloseIdleConnections() }

func (p *Probe) resolve(ctx context.Context) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(p.Target.Host); err == nil {
		return ip, nil
	}
	r := p.Resolver
	if r == nil {
		r = &net.Resolver{PreferGo: true}
	}
	// A pod's resolver would try for 40s (4 search names, 5s, 2 attempts);
	// a lab whose DNS is broken should say so sooner.
	ctx, cancel := context.WithTimeout(ctx, topology.Patient(10*time.Second))
	defer cancel()
	network := "ip4"
	if p.IPv6 {
		network = "ip6"
	}
	ips, err := r.LookupNetIP(ctx, network, p.Target.Host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %s (%s): %w", p.Target.Host, network, err)
	}
	return ips[0].Unmap(), nil
}

func (p *Probe) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return topology.Patient(2 * time.Second)
}

// once sends one request and reads the pod's answer.
func (p *Probe) once(ctx context.Context, addr string) (Answer, error) {
	if p.Target.Proto == "udp" {
		ctx, cancel := context.WithTimeout(ctx, udpTries*p.timeout())
		defer cancel()
		return udpOnce(ctx, addr, p.timeout())
	}
	ctx, cancel := context.WithTimeout(ctx, p.tcpTimeout())
	defer cancel()
	return httpOnce(ctx, addr)
}

// tcpTimeout bounds a request on a new TCP connection: twice the timeout,
// which on the default 2s takes in the kernel's first SYN retransmission
// (after 1s) and its second (after 3s). On a machine this busy a SYN can be
// lost, and a client that waits, as curl does, still gets its answer; a UDP
// request is sent a second time for the same reason (udpTries). A port that
// refuses is answered at once, whatever the bound.
func (p *Probe) tcpTimeout() time.Duration { return 2 * p.timeout() }

func httpOnce(ctx context.Context, addr string) (Answer, error) {
	u := url.URL{Scheme: "http", Host: addr, Path: "/"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Answer{}, err
	}
	// A new connection per request: the proxy balances connections, not requests.
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil}
	defer tr.CloseIdleConnections()
	// Which side a timeout fell on says where to look: no connection (the
	// SYN or its answer lost: the rules, the routes), or a connection that
	// got no answer (the pod, or the proxy's own connection to it).
	var local net.Addr
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(c httptrace.GotConnInfo) { local = c.Conn.LocalAddr() },
	}))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			if local == nil {
				return Answer{}, fmt.Errorf("%w (no connection)", err)
			}
			return Answer{}, fmt.Errorf("%w (connected from %s, no answer)", err, local)
		}
		return Answer{}, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(io.LimitReader(resp.Body, 4096)).ReadString('\n')
	if err != nil && line == "" {
		return Answer{}, fmt.Errorf("read answer: %w", err)
	}
	return ParseAnswer(line)
}

// udpTries is how many times udpOnce sends its datagram. UDP promises no
// delivery, and a client that wants an answer sends again when none came in
// time: dig tries 3 times, a pod's resolver twice. On a machine this busy a
// datagram can sit in a queue past a deadline (the proxy's, the pod's), and
// one lost request in 30 would fail a lab check that is about where the
// answers come from.
const udpTries = 2

// udpOnce sends one datagram and reads the pod's answer, sending it again on
// the same socket (the same conntrack entry, the same proxy session, so the
// same pod) when no answer came within try. A refusal (ICMP port
// unreachable: no endpoint, REJECT) is an answer, not sent again.
func udpOnce(ctx context.Context, addr string, try time.Duration) (Answer, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return Answer{}, err
	}
	defer c.Close()
	buf := make([]byte, 2048)
	for attempt := 1; ; attempt++ {
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return Answer{}, err
		}
		deadline := time.Now().Add(try)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		_ = c.SetReadDeadline(deadline)
		n, err := c.Read(buf)
		switch {
		case err == nil:
			return ParseAnswer(string(buf[:n]))
		case attempt == udpTries || !errors.Is(err, os.ErrDeadlineExceeded) || ctx.Err() != nil:
			return Answer{}, err
		}
	}
}
