package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// The backend kinds, one per measurement.
const (
	kindConn   = "conn"   // writes one byte and closes: connections/s
	kindRR     = "rr"     // answers each 64-byte request with 64 bytes: requests/s, idle connections
	kindStream = "stream" // writes zeroes until the client goes: Gbit/s
)

var kinds = []string{kindConn, kindRR, kindStream}

const msgSize = 64

// backends runs the test servers on loopback, two per kind.
type backends struct {
	addrs map[string][]string // kind -> "127.0.0.1:port"
	lns   []net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  map[net.Conn]struct{}
}

func startBackends() (*backends, error) {
	b := &backends{addrs: map[string][]string{}, open: map[net.Conn]struct{}{}}
	for _, kind := range kinds {
		for range 2 {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				b.close()
				return nil, err
			}
			b.lns = append(b.lns, ln)
			b.addrs[kind] = append(b.addrs[kind], ln.Addr().String())
			b.wg.Go(func() { b.serve(ln, kind) })
		}
	}
	return b, nil
}

// serve accepts until the listener is closed, one goroutine per connection.
func (b *backends) serve(ln net.Listener, kind string) {
	handle := map[string]func(net.Conn){kindConn: serveConn, kindRR: serveRR, kindStream: serveStream}[kind]
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.open[c] = struct{}{}
		b.mu.Unlock()
		b.wg.Go(func() {
			defer b.forget(c)
			handle(c)
		})
	}
}

func (b *backends) forget(c net.Conn) {
	c.Close()
	b.mu.Lock()
	delete(b.open, c)
	b.mu.Unlock()
}

func (b *backends) close() {
	for _, ln := range b.lns {
		ln.Close()
	}
	b.mu.Lock()
	for c := range b.open {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func serveConn(c net.Conn) { c.Write([]byte{'x'}) }

func serveRR(c net.Conn) {
	buf := make([]byte, msgSize)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

func serveStream(c net.Conn) {
	buf := make([]byte, 256<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// waitListening dials addr until it answers or ctx ends.
func waitListening(ctx context.Context, addr string) error {
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp4", addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
