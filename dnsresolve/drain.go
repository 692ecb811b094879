package dnsresolve

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// drainListener is the TCP listener a Server serves on. It lets Serve stop
// TCP in two steps, so that a query a client has sent is answered even
// when the Server is stopping:
//
//  1. drain: no connection is accepted any more (those waiting in the
//     socket's queue stay there, for another Server that reads the same
//     socket, a reloaded configuration's), and each connection is closed
//     once it has answered a query and is waiting for the next one; one
//     that has answered none yet (just accepted, its query on the way) is
//     served first.
//  2. miekg/dns's ShutdownContext, which ends whatever is left.
//
// miekg/dns alone does step 2 only: it unblocks every connection's read at
// once, so a connection accepted an instant before, whose query had not
// been read yet, is closed unanswered (seen as resets while clusterdns
// reloaded its Corefile).
type drainListener struct {
	net.Listener
	deadline interface{ SetDeadline(time.Time) error } // of Listener

	draining atomic.Bool
	mu       sync.Mutex
	conns    map[*drainConn]struct{}
}

// newDrainListener wraps ln, or returns nil when ln cannot be drained (it
// has no deadline to unblock Accept with).
func newDrainListener(ln net.Listener) *drainListener {
	d, ok := ln.(interface{ SetDeadline(time.Time) error })
	if !ok {
		return nil
	}
	return &drainListener{Listener: ln, deadline: d, conns: map[*drainConn]struct{}{}}
}

// Accept returns the next connection; once draining, net.ErrClosed, which
// ends miekg/dns's accept loop without closing the socket.
func (l *drainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		if l.draining.Load() {
			return nil, net.ErrClosed
		}
		return nil, err
	}
	dc := &drainConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[dc] = struct{}{}
	draining := l.draining.Load()
	l.mu.Unlock()
	if draining {
		dc.drain() // accepted as the drain began: it gets its one answer
	}
	return dc, nil
}

// drain is step 1 above; it does not wait.
func (l *drainListener) drain() {
	l.mu.Lock()
	l.draining.Store(true)
	for c := range l.conns {
		c.drain()
	}
	l.mu.Unlock()
	_ = l.deadline.SetDeadline(aLongTimeAgo) // unblocks Accept
}

// aLongTimeAgo is a deadline that has passed: a read waiting on it returns.
var aLongTimeAgo = time.Unix(1, 0)

// drainConn is an accepted connection that knows whether it has answered
// a query, and once draining lets a read wait only while it has not.
type drainConn struct {
	net.Conn
	l        *drainListener
	answered atomic.Bool // an answer was written
	draining atomic.Bool
}

// drain makes a connection that has answered stop reading now; one that
// has not reads on under miekg/dns's deadlines until it has.
func (c *drainConn) drain() {
	c.draining.Store(true)
	if c.answered.Load() {
		_ = c.Conn.SetReadDeadline(aLongTimeAgo)
	}
}

func (c *drainConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.answered.Store(true)
	if c.draining.Load() {
		_ = c.Conn.SetReadDeadline(aLongTimeAgo)
	}
	return n, err
}

// SetReadDeadline is miekg/dns's before each read: once draining, a
// connection that has answered gets no more time.
func (c *drainConn) SetReadDeadline(t time.Time) error {
	if c.draining.Load() && c.answered.Load() {
		t = aLongTimeAgo
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *drainConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
