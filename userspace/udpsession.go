package userspace

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// udpSession is one client address talking to one endpoint through a socket of
// its own. It starts pending (the socket is being opened: what the client
// sends is queued), is open, then ended.
type udpSession struct {
	l      *udpListener
	client netip.AddrPort
	local  localAddr // where the client's datagrams arrived: replies leave from there
	oob    []byte    // IP_PKTINFO (IPV6_PKTINFO) with local as the source, for the replies

	// lastActive is when a datagram last went either way (UnixNano), read by
	// the table to find idle sessions.
	lastActive atomic.Int64

	mu       sync.Mutex // guards fd: no send or receive races its close
	fd       int        // -1 while pending and once ended
	ended    bool
	endpoint netip.AddrPort
	pending  []*[]byte // datagrams queued while pending (pooled buffers)

	// The table's list, least recently touched first; guarded by the table's mu.
	prev, next *udpSession
	touched    int64 // when it was last moved to the back (UnixNano)
}

var errSessionEnded = errors.New("UDP session ended")

// maxPending bounds what a client may send before its session is open.
const maxPending = 8

// queue keeps a copy of b until the session is open.
func (s *udpSession) queue(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || len(s.pending) >= maxPending {
		return
	}
	buf := datagramPool.Get().(*[]byte)
	*buf = append((*buf)[:0], b...)
	s.pending = append(s.pending, buf)
}

// open makes fd (connected to ep) the session's socket, registers it with the
// replies loop, and sends the queued datagrams. It returns how many bytes it
// sent, or errSessionEnded if the session ended while it was opened (the caller
// then closes fd).
func (s *udpSession) open(fd int, ep netip.AddrPort, replies *replyLoop) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return 0, errSessionEnded
	}
	s.oob = s.local.replyInfo()
	if err := replies.add(fd, s); err != nil {
		return 0, err
	}
	s.fd, s.endpoint = fd, ep
	s.lastActive.Store(time.Now().UnixNano())
	sent := 0
	for _, b := range s.pending {
		if _, err := unix.Write(fd, *b); err == nil {
			sent += len(*b)
		}
		datagramPool.Put(b)
	}
	s.pending = nil
	return sent, nil
}

// send writes b to the endpoint, or queues it while the session is pending. A
// datagram the socket cannot take now (its buffer is full) is dropped, as the
// network would. The error is errSessionEnded, or the endpoint's refusal.
func (s *udpSession) send(b []byte, now time.Time) (sent bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended:
		return false, errSessionEnded
	case s.fd < 0:
		if len(s.pending) < maxPending {
			buf := datagramPool.Get().(*[]byte)
			*buf = append((*buf)[:0], b...)
			s.pending = append(s.pending, buf)
		}
		return false, nil
	}
	s.lastActive.Store(now.UnixNano())
	_, err = unix.Write(s.fd, b)
	if errors.Is(err, unix.EAGAIN) {
		return false, nil
	}
	return err == nil, err
}

// receive reads one reply into buf; n is 0 when there is none.
func (s *udpSession) receive(buf []byte) (n int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return 0, errSessionEnded
	}
	n, err = unix.Read(s.fd, buf)
	if errors.Is(err, unix.EAGAIN) {
		return 0, nil
	}
	if err == nil {
		s.lastActive.Store(time.Now().UnixNano())
	}
	return n, err
}

// end closes the session's socket and drops what it queued. It reports whether
// this call closed an open socket: the caller then gives its descriptor back.
func (s *udpSession) end(replies *replyLoop) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.ended = true
	for _, b := range s.pending {
		datagramPool.Put(b)
	}
	s.pending = nil
	if s.fd < 0 {
		return false
	}
	replies.remove(s.fd)
	unix.Close(s.fd)
	s.fd = -1
	return true
}

// Close ends the session: its service port calls it when the endpoint stops
// serving (see servicePort.setEndpoints).
func (s *udpSession) Close() error {
	s.l.endSession(s, false)
	return nil
}

// sessionTable is a listener's sessions by client address, in a list ordered
// by when each was last touched, so that the idlest is found at the front in
// constant time, to end it (idle timeout) or to make room (the cap).
//
// A datagram from the client moves its session to the back, at most once per
// touchEvery (an eighth of the idle timeout, at most 100ms: a list move per
// datagram would be wasted work), so "idlest" is exact to within that; a reply only
// updates lastActive, and a session found at the front that was active since
// its last move is moved to the back then (a second chance), not ended.
type sessionTable struct {
	l          *udpListener // the sessions' listener
	max        int
	idle       int64 // the idle timeout, in ns
	touchEvery int64

	mu         sync.Mutex
	byClient   map[netip.AddrPort]*udpSession
	head, tail *udpSession
}

func newSessionTable(l *udpListener, max int, idle time.Duration) *sessionTable {
	return &sessionTable{
		l:          l,
		max:        max,
		idle:       int64(idle),
		touchEvery: int64(min(idle/8, 100*time.Millisecond)),
		byClient:   make(map[netip.AddrPort]*udpSession),
	}
}

// getOrAdd returns client's session, or adds a pending one (isNew). If the
// table was full, the idlest session was taken out to make room: evicted, for
// the caller to end.
func (t *sessionTable) getOrAdd(client netip.AddrPort, now time.Time) (s *udpSession, isNew bool, evicted *udpSession) {
	ns := now.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	if s = t.byClient[client]; s != nil {
		if ns-s.touched > t.touchEvery {
			t.moveToBack(s, ns)
		}
		return s, false, nil
	}
	if len(t.byClient) >= t.max {
		evicted = t.idlest()
		t.removeLocked(evicted)
	}
	s = &udpSession{l: t.l, client: client, fd: -1}
	s.lastActive.Store(ns)
	t.byClient[client] = s
	t.pushBack(s, ns)
	return s, true, evicted
}

// idlest returns the session idle longest, giving a second chance to those
// at the front that were active since they were last moved.
func (t *sessionTable) idlest() *udpSession {
	for range len(t.byClient) {
		s := t.head
		if last := s.lastActive.Load(); last-s.touched > t.touchEvery {
			t.moveToBack(s, last)
			continue
		}
		return s
	}
	return t.head
}

// takeIdlest takes out and returns the idlest session, nil if there is none.
func (t *sessionTable) takeIdlest() *udpSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.byClient) == 0 {
		return nil
	}
	s := t.idlest()
	t.removeLocked(s)
	return s
}

// expired takes out and returns the sessions idle for the timeout at now.
func (t *sessionTable) expired(now time.Time) []*udpSession {
	ns := now.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*udpSession
	for s := t.head; s != nil && ns-s.touched >= t.idle; s = t.head {
		if last := s.lastActive.Load(); ns-last < t.idle {
			t.moveToBack(s, last) // active since: a second chance
			continue
		}
		t.removeLocked(s)
		out = append(out, s)
	}
	return out
}

// all takes out and returns every session.
func (t *sessionTable) all() []*udpSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*udpSession, 0, len(t.byClient))
	for s := t.head; s != nil; s = t.head {
		t.removeLocked(s)
		out = append(out, s)
	}
	return out
}

func (t *sessionTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byClient)
}

// remove takes s out, unless it is no longer there (a newer session of the
// same client may have taken its place).
func (t *sessionTable) remove(s *udpSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byClient[s.client] == s {
		t.removeLocked(s)
	}
}

func (t *sessionTable) removeLocked(s *udpSession) {
	delete(t.byClient, s.client)
	t.unlink(s)
}

func (t *sessionTable) pushBack(s *udpSession, ns int64) {
	s.touched = ns
	s.prev, s.next = t.tail, nil
	if t.tail != nil {
		t.tail.next = s
	} else {
		t.head = s
	}
	t.tail = s
}

func (t *sessionTable) unlink(s *udpSession) {
	if s.prev != nil {
		s.prev.next = s.next
	} else if t.head == s {
		t.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else if t.tail == s {
		t.tail = s.prev
	}
	s.prev, s.next = nil, nil
}

func (t *sessionTable) moveToBack(s *udpSession, ns int64) {
	t.unlink(s)
	t.pushBack(s, ns)
}
