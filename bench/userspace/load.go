package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// wrkResult is what one wrk run reports.
type wrkResult struct {
	perSecond float64
	requests  int64   // requests completed
	cpu       float64 // seconds of CPU the proxy process used meanwhile; 0 for direct
	cpuSystem float64 // the part of cpu spent in the kernel (system time)
	// heap allocations of the userspace proxy meanwhile (objects, bytes);
	// they include the pprof server's few answers around the run
	allocs, allocBytes uint64
	switches           switches // the proxy's threads' context switches meanwhile
	errors             string   // wrk's "Socket errors" and non-2xx lines, "" when none
	trouble            string   // troubleCounters that grew meanwhile (tcpTrouble), "" when none

	// Where the machine's time went during the run, in seconds: wrk's CPU
	// (its rusage), the backends' (this process's: it serves them, and does
	// nothing else meanwhile), and the machine's idle, softirq and steal
	// time (/proc/stat, all CPUs). With the proxy's CPU they tell whether a
	// path's rate is bound by CPU (no idle time left) and whose. Steal is
	// time the hypervisor gave the machine's virtual CPUs to other guests,
	// which no other figure of the run shows; on a shared host it is one
	// reason runs of one build differ.
	wrkCPU, backendCPU, idle, softirq, steal float64
}

// perRequest is seconds per request of r, in microseconds.
func (r wrkResult) perRequest(seconds float64) float64 {
	if r.requests == 0 {
		return 0
	}
	return seconds / float64(r.requests) * 1e6
}

// cpuPerRequest is the proxy's CPU time per request, in microseconds.
func (r wrkResult) cpuPerRequest() float64 {
	if r.requests == 0 {
		return 0
	}
	return r.cpu / float64(r.requests) * 1e6
}

var (
	wrkRate     = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkRequests = regexp.MustCompile(`([0-9]+) requests in`)
	wrkErrors   = regexp.MustCompile(`(?m)^\s*(Socket errors:.*|Non-2xx or 3xx responses:.*)$`)
)

// runWrk runs wrk from the client namespace against addr: keep-alive
// requests, or (newConn) a new connection per request ("Connection: close",
// which the backend honours by closing after its reply).
func runWrk(client *namespace, addr string, newConn bool, cfg benchConfig) (wrkResult, error) {
	args := []string{"-t2", fmt.Sprintf("-c%d", cfg.connections), fmt.Sprintf("-d%s", cfg.duration), "--latency"}
	if newConn {
		args = append(args, "-H", "Connection: close")
	}
	args = append(args, "http://"+addr+"/")
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration+time.Minute)
	defer cancel()
	before, err := readTimes()
	if err != nil {
		return wrkResult{}, err
	}
	cmd := client.command(ctx, "wrk", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %w: %s", strings.Join(args, " "), err, out)
	}
	spent, err := before.since()
	if err != nil {
		return wrkResult{}, err
	}
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		return wrkResult{}, fmt.Errorf("wrk said no Requests/sec:\n%s", out)
	}
	rate, _ := strconv.ParseFloat(string(m[1]), 64)
	var requests int64
	if m := wrkRequests.FindSubmatch(out); m != nil {
		requests, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	var errs []string
	for _, e := range wrkErrors.FindAllSubmatch(out, -1) {
		errs = append(errs, strings.TrimSpace(string(e[1])))
	}
	return wrkResult{perSecond: rate, requests: requests, errors: strings.Join(errs, "; "),
		wrkCPU:     (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds(),
		backendCPU: spent.self,
		idle:       spent.idle,
		softirq:    spent.softirq,
		steal:      spent.steal,
	}, nil
}

// cpuTimes are the machine's idle, softirq and steal seconds so far, summed
// over its CPUs.
type cpuTimes struct{ idle, softirq, steal float64 }

// machineCPU reads the "cpu" line of /proc/stat: user nice system idle iowait
// irq softirq steal ..., in clock ticks.
func machineCPU() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	idle, err1 := strconv.ParseUint(f[4], 10, 64)
	iowait, err2 := strconv.ParseUint(f[5], 10, 64)
	softirq, err3 := strconv.ParseUint(f[7], 10, 64)
	steal, err4 := strconv.ParseUint(f[8], 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return cpuTimes{}, err
	}
	return cpuTimes{idle: float64(idle+iowait) / clockTicks, softirq: float64(softirq) / clockTicks,
		steal: float64(steal) / clockTicks}, nil
}

// timeSpent is where the machine's time went, in seconds: this process's CPU
// (the backends, and the one stream's reader) and the machine's idle,
// softirq and steal time, summed over its CPUs. readTimes gives the totals so far;
// since, what was spent after such a reading.
type timeSpent struct{ self, idle, softirq, steal float64 }

// readTimes reads the totals so far.
func readTimes() (timeSpent, error) {
	self, err1 := selfCPU()
	stat, err2 := machineCPU()
	return timeSpent{self: self, idle: stat.idle, softirq: stat.softirq, steal: stat.steal}, errors.Join(err1, err2)
}

// since is the time spent after the reading t.
func (t timeSpent) since() (timeSpent, error) {
	now, err := readTimes()
	return timeSpent{self: now.self - t.self, idle: now.idle - t.idle, softirq: now.softirq - t.softirq,
		steal: now.steal - t.steal}, err
}

// selfCPU is the CPU time (user and system) this process has used so far.
func selfCPU() (float64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(), nil
}

// streamResult is one bulk stream: its rate, and where the machine's time
// went while it ran, as for wrk: the proxy's CPU (seconds, 0 for direct) and
// the rest (this process's: the backend that writes and the reader in the
// client namespace; softirq; idle).
type streamResult struct {
	gbits    float64
	bytes    uint64
	proxyCPU float64
	timeSpent
}

// perGB is seconds per gigabyte (10^9 bytes) moved, in milliseconds.
func (r streamResult) perGB(seconds float64) float64 {
	if r.bytes == 0 {
		return 0
	}
	return seconds / (float64(r.bytes) / 1e9) * 1e3
}

// oneStream reads from a streaming backend through p, from the client
// namespace, for d, and returns Gbit/s and where the machine's time went.
func oneStream(client *namespace, p path, d time.Duration) (streamResult, error) {
	var r streamResult
	c, err := client.dial("tcp4", p.addr(kindStream))
	if err != nil {
		return r, err
	}
	defer c.Close()
	before, err1 := readTimes()
	var proxyBefore float64
	var err2 error
	if p.proc != nil {
		proxyBefore, err2 = p.proc.cpuSeconds()
	}
	if err := errors.Join(err1, err2); err != nil {
		return r, err
	}
	buf := make([]byte, 256<<10)
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	for {
		m, err := c.Read(buf)
		r.bytes += uint64(m)
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			return r, err
		}
		r.gbits = float64(r.bytes) * 8 / 1e9 / time.Since(start).Seconds()
		break
	}
	r.timeSpent, err1 = before.since()
	if p.proc != nil {
		var after float64
		after, err2 = p.proc.cpuSeconds()
		r.proxyCPU = after - proxyBefore
	}
	return r, errors.Join(err1, err2)
}

// openIdle opens n HTTP connections to addr from the client namespace, each
// proven to reach a backend by one request, and leaves them open. The caller
// closes them.
func openIdle(client *namespace, addr string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, n)
	buf := make([]byte, len(httpOK))
	for i := range n {
		c, err := client.dial("tcp4", addr)
		if err == nil {
			conns = append(conns, c)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil {
				_, err = io.ReadFull(c, buf)
			}
		}
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("idle connection %d: %w", i, err)
		}
	}
	return conns, nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// udpResult is one UDP measurement: exchanges done and lost.
type udpResult struct {
	ops, lost uint64
	elapsed   time.Duration
}

func (r udpResult) perSecond() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// udpDatagrams runs workers clients, each one socket (one session) exchanging
// 64-byte datagrams in lock step with addr for d.
func udpDatagrams(client *namespace, addr string, workers int, d time.Duration) (udpResult, error) {
	return udpRun(workers, d, func(deadline time.Time) (uint64, uint64, error) {
		c, err := client.dial("udp4", addr)
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		buf := make([]byte, 64)
		var ok, lost uint64
		for time.Now().Before(deadline) {
			c.Write(buf)
			c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := c.Read(buf); err != nil {
				lost++
				continue
			}
			ok++
		}
		return ok, lost, nil
	})
}

// udpSessions runs workers clients, each opening a new socket (a new session)
// for every 64-byte exchange with addr, for d.
func udpSessions(client *namespace, addr string, workers int, d time.Duration) (udpResult, error) {
	return udpRun(workers, d, func(deadline time.Time) (uint64, uint64, error) {
		buf := make([]byte, 64)
		var ok, lost uint64
		for time.Now().Before(deadline) {
			c, err := client.dial("udp4", addr)
			if err != nil {
				return ok, lost, err
			}
			c.Write(buf)
			c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := c.Read(buf); err != nil {
				lost++
			} else {
				ok++
			}
			c.Close()
		}
		return ok, lost, nil
	})
}

func udpRun(workers int, d time.Duration, work func(deadline time.Time) (ok, lost uint64, err error)) (udpResult, error) {
	var ops, lost atomic.Uint64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	deadline := start.Add(d)
	for range workers {
		wg.Go(func() {
			o, l, err := work(deadline)
			ops.Add(o)
			lost.Add(l)
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	wg.Wait()
	r := udpResult{ops: ops.Load(), lost: lost.Load(), elapsed: time.Since(start)}
	if err, _ := firstErr.Load().(error); err != nil {
		return r, err
	}
	return r, nil
}

// udpPaced opens rate new sessions per second for d, each a new socket that
// sends one datagram and waits for the reply, and counts the replies lost.
func udpPaced(client *namespace, addr string, rate int, d time.Duration) (udpResult, error) {
	const tick = 10 * time.Millisecond
	perTick := rate * int(tick) / int(time.Second)
	var ok, lost atomic.Uint64
	var wg sync.WaitGroup
	start := time.Now()
	t := time.NewTicker(tick)
	defer t.Stop()
	var dialErr error
	for time.Since(start) < d && dialErr == nil {
		for range perTick {
			c, err := client.dial("udp4", addr)
			if err != nil {
				dialErr = err
				break
			}
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 64)
				c.Write(buf)
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := c.Read(buf); err != nil {
					lost.Add(1)
				} else {
					ok.Add(1)
				}
			})
		}
		<-t.C
	}
	elapsed := time.Since(start)
	wg.Wait()
	return udpResult{ops: ok.Load(), lost: lost.Load(), elapsed: elapsed}, dialErr
}

// openUDPSessions opens n sessions to addr (a socket each, one exchange) and
// leaves the sockets open. The caller closes them. The exchanges go in
// batches (a datagram on every socket of a batch, then the replies), so that
// all the sessions open within a few seconds, well inside the proxy's idle
// timeout: the memory per session is read while they are still open.
func openUDPSessions(client *namespace, addr string, n int) ([]net.Conn, error) {
	const batch = 256
	conns := make([]net.Conn, 0, n)
	buf := make([]byte, 64)
	for len(conns) < n {
		first := len(conns)
		for range min(batch, n-first) {
			c, err := client.dial("udp4", addr)
			if err != nil {
				closeAll(conns)
				return nil, fmt.Errorf("UDP session %d: %w", len(conns), err)
			}
			conns = append(conns, c)
		}
		pending := conns[first:]
		for try := 0; len(pending) > 0; try++ {
			if try == 4 {
				closeAll(conns)
				return nil, fmt.Errorf("UDP sessions: %d of a batch had no reply after 4 tries", len(pending))
			}
			for _, c := range pending {
				c.Write(buf)
			}
			deadline := time.Now().Add(time.Second)
			var lost []net.Conn
			for _, c := range pending {
				c.SetReadDeadline(deadline)
				if _, err := c.Read(buf); err != nil {
					lost = append(lost, c)
				}
			}
			pending = lost
		}
	}
	return conns, nil
}

var errNoRow = errors.New("not measured")
