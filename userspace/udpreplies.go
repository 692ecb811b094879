package userspace

import (
	"errors"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// replyLoop is the epoll set of a UDP listener's session sockets. Go's own
// poller would need a goroutine parked on each socket; one epoll set lets one
// goroutine wait for all of them.
type replyLoop struct {
	epfd int
	wake int // an eventfd in the set: written to stop the loop

	mu       sync.Mutex
	sessions map[int32]*udpSession // by socket
	stopping bool
}

func newReplyLoop() (*replyLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, err
	}
	return &replyLoop{epfd: epfd, wake: wake, sessions: make(map[int32]*udpSession)}, nil
}

// add watches fd, the socket of s, for replies.
func (r *replyLoop) add(fd int, s *udpSession) error {
	r.mu.Lock()
	r.sessions[int32(fd)] = s
	r.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		r.remove(fd)
		return err
	}
	return nil
}

// remove stops watching fd, before its session closes it.
func (r *replyLoop) remove(fd int) {
	unix.EpollCtl(r.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	r.mu.Lock()
	delete(r.sessions, int32(fd))
	r.mu.Unlock()
}

func (r *replyLoop) session(fd int32) *udpSession {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[fd]
}

// stop makes serveReplies end its sessions and return.
func (r *replyLoop) stop() {
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	unix.Write(r.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
}

func (r *replyLoop) stopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopping
}

// serveReplies copies the endpoints' datagrams back to the clients until the
// listener is closed, and ends the sessions that have been idle for
// Config.UDPIdleTimeout. Replies are written on the listener socket, from the
// address the client wrote to: conntrack then recognises them as replies of the
// REDIRECTed flow and rewrites their source back to the Service's address,
// which is the only one the client accepts.
func (p *Proxier) serveReplies(l *udpListener) {
	r := l.replies
	defer func() {
		for _, s := range l.sessions.all() {
			l.endSession(s, true)
		}
		unix.Close(r.epfd)
		unix.Close(r.wake)
	}()
	// Idle sessions are looked for every quarter of the timeout, so a session
	// ends between 1 and 1.25 timeouts after its last datagram.
	sweep := max(p.cfg.UDPIdleTimeout/4, time.Millisecond)
	nextSweep := time.Now().Add(sweep)
	buf := make([]byte, maxDatagram)
	events := make([]unix.EpollEvent, 128)
	for {
		wait := max(time.Until(nextSweep), 0)
		n, err := unix.EpollWait(r.epfd, events, int(wait.Milliseconds())+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		for _, ev := range events[:max(n, 0)] {
			if int(ev.Fd) == r.wake {
				if r.stopped() {
					return
				}
				continue
			}
			if s := r.session(ev.Fd); s != nil {
				p.relayReplies(l, s, buf)
			}
		}
		if now := time.Now(); !now.Before(nextSweep) {
			for _, s := range l.sessions.expired(now) {
				l.endSession(s, true)
			}
			nextSweep = now.Add(sweep)
		}
	}
}

// relayReplies passes on what s's endpoint sent: a few datagrams at a time, so
// that one busy session does not starve the others (the set is level-triggered:
// what is left wakes the loop again).
func (p *Proxier) relayReplies(l *udpListener, s *udpSession, buf []byte) {
	for range 8 {
		n, err := s.receive(buf)
		if err != nil {
			if !errors.Is(err, errSessionEnded) { // refused: the endpoint is not there
				l.sp.counters.dialFailures.Add(1)
				clientIP := s.client.Addr().Unmap()
				p.pickFrom(l.sp, l.external, clientIP).Reset(l.sp.name, clientIP)
			}
			l.endSession(s, true)
			return
		}
		if n == 0 {
			return
		}
		if _, _, err := l.conn.WriteMsgUDPAddrPort(buf[:n], s.oob, s.client); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // the client is gone (refused): its session idles out
		}
		l.sp.counters.toClients.Add(uint64(n))
	}
}
