package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// The backend kinds, one per measurement.
const (
	kindHTTP   = "http"   // a tiny HTTP server for wrk: connections/s, requests/s, idle connections
	kindStream = "stream" // writes zeroes until the client goes: Gbit/s
	kindUDP    = "udp"    // echoes each datagram: sessions/s, datagrams/s
)

var tcpKinds = []string{kindHTTP, kindStream}

// backendIP is the node's address on the link to the client namespace: the
// backends listen there, so that every path (direct, userspace, haproxy)
// crosses the same link.
const backendIP = "198.19.0.1"

// backends runs the test servers in the node namespace, two per kind.
type backends struct {
	addrs map[string][]string // kind -> "198.19.0.1:port"
	lns   []io.Closer
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  map[net.Conn]struct{}
}

func startBackends() (*backends, error) {
	b := &backends{addrs: map[string][]string{}, open: map[net.Conn]struct{}{}}
	for range 2 {
		for _, kind := range tcpKinds {
			ln, err := net.Listen("tcp4", backendIP+":0")
			if err != nil {
				b.close()
				return nil, err
			}
			b.lns = append(b.lns, ln)
			b.addrs[kind] = append(b.addrs[kind], ln.Addr().String())
			handle := map[string]func(net.Conn){kindHTTP: serveHTTP, kindStream: serveStream}[kind]
			b.wg.Go(func() { b.serve(ln, handle) })
		}
		pc, err := net.ListenPacket("udp4", backendIP+":0")
		if err != nil {
			b.close()
			return nil, err
		}
		b.lns = append(b.lns, pc)
		b.addrs[kindUDP] = append(b.addrs[kindUDP], pc.LocalAddr().String())
		b.wg.Go(func() { serveUDPEcho(pc) })
	}
	return b, nil
}

// serve accepts until the listener is closed, one goroutine per connection.
func (b *backends) serve(ln net.Listener, handle func(net.Conn)) {
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

var (
	httpOK    = []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	httpClose = []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	closeHdr  = []byte("Connection: close")
	endOfHead = []byte("\r\n\r\n")
)

// serveHTTP answers each request (a GET without a body, as wrk sends) with a
// 2-byte body, and closes after a request that asked for it: the least a
// backend can do, so that the figures are the paths', not the backend's.
func serveHTTP(c net.Conn) {
	buf := make([]byte, 4096)
	have := 0
	for {
		n, err := c.Read(buf[have:])
		if err != nil {
			return
		}
		have += n
		for {
			end := bytes.Index(buf[:have], endOfHead)
			if end < 0 {
				break
			}
			req := buf[:end]
			closing := bytes.Contains(req, closeHdr)
			reply := httpOK
			if closing {
				reply = httpClose
			}
			if _, err := c.Write(reply); err != nil || closing {
				return
			}
			have = copy(buf, buf[end+len(endOfHead):have])
		}
		if have == len(buf) {
			return // not HTTP as wrk speaks it
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

func serveUDPEcho(pc net.PacketConn) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		pc.WriteTo(buf[:n], from)
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
