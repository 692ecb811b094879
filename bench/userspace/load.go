package main

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// result is one measurement: operations (connections, requests or bytes) done in
// elapsed, and how many attempts failed.
type result struct {
	ops     uint64
	errors  uint64
	elapsed time.Duration
}

func (r result) perSecond() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// run starts workers copies of work, each given its address round-robin, and
// stops them after d. work returns the operations it did and whether it failed;
// it is called again until the deadline.
func run(addrs []string, workers int, d time.Duration, work func(addr string, deadline time.Time) (uint64, error)) result {
	var ops, errs atomic.Uint64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range workers {
		addr := addrs[i%len(addrs)]
		wg.Go(func() {
			for time.Now().Before(deadline) {
				n, err := work(addr, deadline)
				ops.Add(n)
				if err != nil && time.Now().Before(deadline) {
					errs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return result{ops: ops.Load(), errors: errs.Load(), elapsed: time.Since(start)}
}

// oneConnection opens a connection, reads the backend's byte and its close.
func oneConnection(addr string, deadline time.Time) (uint64, error) {
	c, err := net.DialTimeout("tcp4", addr, time.Until(deadline)+time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(deadline.Add(time.Second))
	b, err := io.ReadAll(c)
	if err != nil || len(b) != 1 {
		return 0, fmt.Errorf("read %d bytes: %v", len(b), err)
	}
	return 1, nil
}

// requests keeps one connection and exchanges 64-byte messages until deadline.
func requests(addr string, deadline time.Time) (uint64, error) {
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(deadline.Add(time.Second))
	buf := make([]byte, msgSize)
	var n uint64
	for time.Now().Before(deadline) {
		if _, err := c.Write(buf); err != nil {
			return n, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// stream reads from a streaming backend until deadline and returns the bytes.
func stream(addr string, deadline time.Time) (uint64, error) {
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetReadDeadline(deadline)
	buf := make([]byte, 256<<10)
	var n uint64
	for {
		m, err := c.Read(buf)
		n += uint64(m)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return n, nil
			}
			return n, err
		}
	}
}

// openIdle opens n connections to addrs (round-robin), each proven to reach a
// backend by one request, and leaves them open. The caller closes them.
func openIdle(addrs []string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, n)
	buf := make([]byte, msgSize)
	for i := range n {
		c, err := net.Dial("tcp4", addrs[i%len(addrs)])
		if err == nil {
			conns = append(conns, c)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err = c.Write(buf); err == nil {
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
