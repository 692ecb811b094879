package userspace

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// copyHalf copies one direction of c, src to dst, until src ends, and reports
// whether it ended at src's end of stream (the caller passes the FIN on). An
// error (a reset, or the proxier aborting c) aborts both sides: the other
// direction has nothing left to wait for, and a peer must not mistake the end
// for a clean one.
//
// It reads into a pooled buffer, and takes the buffer only once the socket has
// data: an idle connection holds no buffer, no pipe, only its two sockets and
// two parked goroutines. Small messages (requests and replies) cost one read
// and one write each.
//
// A read that fills the buffer means a bulk transfer: then the bytes queued
// beyond it are moved with splice(2) (io.CopyN between two *net.TCPConn ends in
// TCPConn.ReadFrom, which splices through a pipe, without copying the bytes
// into Go). Exactly the queued bytes: a splice that waited for more would hold
// its pipe (two more file descriptors) while the connection idles, and a proxy
// holding 10,000 idle connections would need 60,000 descriptors
// (inetaf/tcpproxy#31).
func copyHalf(c *tcpConn, dst, src *net.TCPConn, bytes *atomic.Uint64) (eof bool) {
	rc, err := src.SyscallConn()
	if err != nil {
		c.abort()
		return false
	}
	var (
		buf  *[]byte
		n    int
		rerr error
	)
	// read is called by the poller: once at once, and again each time src
	// becomes readable. It takes a buffer only when there is something to read.
	read := func(fd uintptr) bool {
		if buf == nil {
			buf = copyBuffers.Get().(*[]byte)
		}
		n, rerr = unix.Read(int(fd), *buf)
		if errors.Is(rerr, unix.EAGAIN) {
			copyBuffers.Put(buf)
			buf = nil
			return false // park until readable, holding nothing
		}
		return true
	}
	for {
		if err := rc.Read(read); err != nil {
			rerr = err
		}
		if rerr != nil || n < 0 {
			release(&buf)
			c.abort()
			return false
		}
		if n == 0 { // the end of the stream
			release(&buf)
			return true
		}
		full := n == len(*buf)
		_, werr := dst.Write((*buf)[:n])
		bytes.Add(uint64(n))
		release(&buf)
		if werr != nil {
			c.abort()
			return false
		}
		if full {
			if err := spliceQueued(dst, src, rc, bytes); err != nil {
				c.abort()
				return false
			}
		}
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

func release(buf **[]byte) {
	if *buf != nil {
		copyBuffers.Put(*buf)
		*buf = nil
	}
}

// copyBufferSize is the read size of a copy: a request or reply fits; a read
// that fills it hands over to splice.
const copyBufferSize = 16 << 10

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}
