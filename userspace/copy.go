package userspace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// run copies one direction of the connection h.c, src to dst, until src ends,
// and reports whether it ended at src's end of stream (the caller passes the
// FIN on). An error (a reset, or the proxier aborting the connection) aborts
// both sides: the other direction has nothing left to wait for, and a peer
// must not mistake the end for a clean one.
//
// It reads into a pooled buffer, and takes the buffer only once the socket has
// data: an idle connection holds no buffer, no pipe, only its two sockets and
// two parked goroutines. A small message (a request, a reply) costs one read
// and one write, both made inside the poller's callback (halfCopy.step), which
// parks again without another read when TCP_INQ says nothing is left.
//
// A read that fills the buffer means a bulk transfer: then the bytes queued
// beyond it are moved with splice(2) (io.CopyN between two *net.TCPConn ends in
// TCPConn.ReadFrom, which splices through a pipe, without copying the bytes
// into Go). Exactly the queued bytes: a splice that waited for more would hold
// its pipe (two more file descriptors) while the connection idles, and a proxy
// holding 10,000 idle connections would need 60,000 descriptors
// (inetaf/tcpproxy#31).
func (h *halfCopy) run() (eof bool) {
	h.callback = h.rawCallback // one allocation per direction, not one per message
	for {
		h.out = stepResult{}
		if err := h.src.Read(h.callback); err != nil {
			h.out.err = err
		}
		if done, eof := h.afterStep(); done {
			return eof
		}
	}
}

// afterStep does, outside src's callback, what step left to do: what may
// wait (a write dst cannot take now, a splice), and the end. It reports
// whether the copy is done, and whether it ended at src's end of stream.
func (h *halfCopy) afterStep() (done, eof bool) {
	out := h.out
	defer h.release()
	switch {
	case out.err != nil:
		h.c.abort()
		return true, false
	case out.eof:
		return true, true
	case len(out.unwritten) > 0:
		// dst's send buffer is full: wait for it here, outside src's
		// callback, where an abort that closes the sockets wakes us.
		n, err := h.dstConn.Write(out.unwritten)
		h.bytes.Add(uint64(n))
		if err != nil {
			h.c.abort()
			return true, false
		}
	case out.full:
		h.release() // not held while splicing
		if err := spliceQueued(h.dstConn, h.srcConn, h.src, h.bytes); err != nil {
			h.c.abort()
			return true, false
		}
	}
	return false, false
}

// halfCopy is the state of one direction between the poller's calls of step.
// Both directions live in their tcpConn (one allocation per connection, not
// three), and share its two sockets' RawConns.
//
// The read and the write of a message run nested (the write in dst's RawConn
// callback, inside src's), so the frames on that path are kept small and the
// system calls are made with syscall.RawSyscall directly: the whole path,
// from the goroutine's start to the write, is about 1 KiB deep, within the
// 2 KiB a goroutine's stack may start with (of which the runtime keeps about
// 900 bytes in reserve). A copy goroutine that outgrew it would grow its stack
// on every connection (runtime.newstack copies it and adjusts every frame), as
// the diallers did (see dialler).
//
// RawSyscall, not Syscall: both sockets are non-blocking, so the read and the
// write never wait, and the runtime need not be told that the goroutine is in
// the kernel. Told (Syscall), its monitor (sysmon) hands the goroutine's P to
// another thread when the call outlasts one of its ticks (20µs or more) while
// other goroutines wait to run, and a write on a local socket can (it carries
// the receiver's protocol work): a thread woken, and switched to, for a call
// that was about to return.
type halfCopy struct {
	c                *tcpConn
	dstConn, srcConn *net.TCPConn
	dst, src         syscall.RawConn
	bytes            *atomic.Uint64
	buf              *[]byte // nil while parked

	// copied counts the messages read so far, up to 2; inq is whether src
	// reports what is still queued after each read (TCP_INQ): see step.
	copied int
	inq    inqState

	// callback is both RawConn callbacks, step (src's Read) and writeNow
	// (dst's Write, nested in step, which sets wbuf while it writes): one
	// func value, which escapes to the poller, allocated once per direction.
	callback func(fd uintptr) bool
	out      stepResult // why step returned true

	oob [24]byte // recvmsg's control message: one TCP_CM_INQ (unix.CmsgSpace(4))

	wbuf  []byte // writeNow's argument, nil unless step is writing; and its results
	wn    int
	errno syscall.Errno
}

// stepResult is what step leaves to copyHalf, outside the poller's callback.
type stepResult struct {
	err       error
	eof       bool   // src's end of stream
	unwritten []byte // what dst did not take without waiting
	full      bool   // the read filled the buffer: a bulk transfer, splice the rest
}

type inqState uint8

const (
	inqOff         inqState = iota // not asked for yet
	inqOn                          // each read reports what is left
	inqUnsupported                 // the kernel refused TCP_INQ (before Linux 4.18)
)

// step is called by the poller (RawConn.Read): at once, and again each time
// src becomes readable while step returned false. It reads what src has,
// writes it to dst without waiting, and returns false to park, or true (with
// h.out) when copyHalf has something to do that may wait: an end, a write dst
// cannot take now, a bulk transfer.
//
// When to park is the point. Go's poller is edge-triggered and says only
// "readable": if the FIN came with the last data, no new event comes, and a
// goroutine that parked after that data would wait forever. So after a read
// step must know that nothing is left: either a read that finds the socket
// empty (EAGAIN), one more system call per message, or TCP_INQ, with which
// the kernel tells after each read how much is still queued, and counts a
// received FIN as 1. Parking inside the callback (returning false) keeps
// every readiness event that came after the read; a second RawConn.Read
// would forget them (it resets the readiness first), and would have to read
// again before it parks.
func (h *halfCopy) step(fd uintptr) bool {
	for {
		if h.buf == nil {
			h.buf = copyBuffers.Get().(*[]byte)
		}
		n, inq, errno := h.read(fd)
		if errno != 0 || n == 0 {
			return h.readEnded(fd, errno)
		}
		h.copied = min(h.copied+1, 2)
		h.wbuf = (*h.buf)[:n] // n > 0: not nil
		err := h.dst.Write(h.callback)
		h.wbuf = nil // the buffer goes back to the pool: hold no reference to it
		if err != nil || h.errno != 0 {
			return h.writeFailed(err)
		}
		h.bytes.Add(uint64(h.wn))
		switch {
		case h.wn < n:
			h.out.unwritten = (*h.buf)[h.wn:n]
			return true
		case n == len(*h.buf):
			h.out.full = true
			return true
		case inq == 0:
			h.release()
			return false // nothing queued, no FIN: park
		}
		// inq > 0 (more data, or the FIN) or unknown (-1): read again.
	}
}

// rawCallback is h.callback: writeNow while step writes, step otherwise.
func (h *halfCopy) rawCallback(fd uintptr) bool {
	if h.wbuf != nil {
		return h.writeNow(fd)
	}
	return h.step(fd)
}

// readEnded handles a read that returned no data: EAGAIN parks (false), the
// end of the stream and errors go to copyHalf (true).
//
// Setting TCP_INQ is a system call too, which a connection that carries one
// request and one reply would not win back: a direction asks for it when it
// parks after its second message.
func (h *halfCopy) readEnded(fd uintptr, errno syscall.Errno) bool {
	switch errno {
	case 0:
		h.out.eof = true
		return true
	case syscall.EAGAIN:
		if h.copied == 2 && h.inq == inqOff {
			h.inq = inqOn
			if unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_INQ, 1) != nil {
				h.inq = inqUnsupported
			}
		}
		h.release()
		return false // park until readable, holding nothing
	}
	h.out.err = fmt.Errorf("read: %w", errno)
	return true
}

// read reads from fd into the buffer (recvmsg(2)). With TCP_INQ on, inq is
// what is still queued after the read (a received FIN counts as 1, so 0
// means: no byte and no FIN); without it, -1.
func (h *halfCopy) read(fd uintptr) (n, inq int, errno syscall.Errno) {
	iov := unix.Iovec{Base: &(*h.buf)[0]}
	iov.SetLen(len(*h.buf))
	msg := unix.Msghdr{Iov: &iov, Iovlen: 1, Control: &h.oob[0]}
	msg.SetControllen(len(h.oob))
	r, _, errno := syscall.RawSyscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&msg)), 0)
	if errno != 0 {
		return 0, -1, errno
	}
	return int(r), inqOf(h.oob[:msg.Controllen]), 0
}

// inqOf returns the value of a TCP_CM_INQ control message, -1 if oob holds
// none.
func inqOf(oob []byte) int {
	if len(oob) == 0 {
		return -1
	}
	hdr, data, _, err := unix.ParseOneSocketControlMessage(oob)
	if err != nil || hdr.Level != unix.SOL_TCP || hdr.Type != unix.TCP_CM_INQ || len(data) < 4 {
		return -1
	}
	return int(int32(binary.NativeEndian.Uint32(data)))
}

// writeNow writes h.wbuf to fd once, without waiting: EAGAIN is a short write
// of nothing. It is dst's RawConn.Write callback.
func (h *halfCopy) writeNow(fd uintptr) bool {
	r, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&h.wbuf[0])), uintptr(len(h.wbuf)))
	h.wn, h.errno = int(r), errno
	if errno != 0 {
		h.wn = 0
		if errno == syscall.EAGAIN {
			h.errno = 0
		}
	}
	return true
}

// writeFailed records why a write failed (dst closed, or the write's
// error), for copyHalf to abort the connection.
func (h *halfCopy) writeFailed(err error) bool {
	if h.errno != 0 {
		err = errors.Join(err, fmt.Errorf("write: %w", h.errno))
	}
	h.out.err = err
	return true
}

func (h *halfCopy) release() {
	if h.buf != nil {
		copyBuffers.Put(h.buf)
		h.buf = nil
	}
}

// spliceQueued moves what is queued on src to dst with splice(2), without
// waiting for more.
func spliceQueued(dst, src *net.TCPConn, rc interface {
	Control(func(uintptr)) error
}, bytes *atomic.Uint64) error {
	var queued int
	var qerr error
	if err := rc.Control(func(fd uintptr) { queued, qerr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		return err
	}
	if qerr != nil || queued == 0 {
		return qerr
	}
	n, err := io.CopyN(dst, src, int64(queued))
	bytes.Add(uint64(n))
	return err
}

// copyBufferSize is the read size of a copy: a request or reply fits; a read
// that fills it hands over to splice.
const copyBufferSize = 16 << 10

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}
