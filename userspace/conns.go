package userspace

import (
	"net"
	"sync"
	"sync/atomic"
)

// tcpConn is one proxied connection: the client's socket, and the endpoint's
// once it is dialled. It ends in one of two ways:
//
//   - both directions reach their end of stream (each FIN is passed on), and
//     both sockets are closed: the client saw a complete exchange;
//   - the proxy aborts it (no endpoint answered, a copy failed, the shutdown
//     grace period is over): both sockets are reset (SO_LINGER 0, RST), so the
//     client sees a failure, never a clean FIN that looks like a complete, empty
//     reply.
type tcpConn struct {
	client   *net.TCPConn
	sp       *servicePort
	external bool         // came in through the node port: externalTrafficPolicy applies
	copying  atomic.Int32 // directions still copying

	mu      sync.Mutex
	backend *net.TCPConn // nil until dialled
	aborted bool

	// up copies client to endpoint, down endpoint to client (halfCopy.run).
	up, down halfCopy
}

// setBackend records the dialled endpoint socket. It returns false if the
// connection was aborted meanwhile (the grace period ended during the dial): the
// caller then resets backend.
func (c *tcpConn) setBackend(backend *net.TCPConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted {
		return false
	}
	c.backend = backend
	return true
}

// abort resets both sides. It may be called more than once, from any goroutine.
func (c *tcpConn) abort() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.aborted = true
	reset(c.client)
	if c.backend != nil {
		reset(c.backend)
	}
}

// close closes both sides after both directions ended cleanly.
func (c *tcpConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.client.Close()
	if c.backend != nil {
		c.backend.Close()
	}
}

// reset closes c with SO_LINGER 0: the kernel sends an RST instead of a FIN and
// drops what is still unsent.
func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// connSet is the set of open TCP connections: what Shutdown waits for, and
// resets when the grace period is over. A connection is added right after
// Accept, under the same lock as the closed check, so that a connection
// accepted while Shutdown starts is either waited for or reset, never missed
// (a sync.WaitGroup would race: Add after Wait has begun).
type connSet struct {
	mu      sync.Mutex
	open    map[*tcpConn]struct{}
	closing bool
	drained chan struct{} // closed when closing and the set is empty
	done    bool          // drained is closed
}

func newConnSet() *connSet {
	return &connSet{open: make(map[*tcpConn]struct{}), drained: make(chan struct{})}
}

// add registers c; it returns false once Shutdown has begun.
func (s *connSet) add(c *tcpConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.open[c] = struct{}{}
	return true
}

func (s *connSet) remove(c *tcpConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open, c)
	s.drainedLocked()
}

func (s *connSet) drainedLocked() {
	if s.closing && len(s.open) == 0 && !s.done {
		s.done = true
		close(s.drained)
	}
}

// close refuses new connections and returns a channel closed when the last open
// one has ended.
func (s *connSet) close() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	s.drainedLocked()
	return s.drained
}

// abortAll resets every open connection.
func (s *connSet) abortAll() {
	s.mu.Lock()
	conns := make([]*tcpConn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.abort()
	}
}

// len is the number of open connections.
func (s *connSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}
