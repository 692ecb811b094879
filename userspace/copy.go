package userspace

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// proxyCopy copies src to dst until src ends, then half-closes dst so that its
// peer sees the end of the stream while the other direction goes on.
//
// Between two *net.TCPConn, io.Copy ends in TCPConn.ReadFrom, which on Linux
// moves the bytes with splice(2) through a pipe, without copying them into Go.
// But a splice holds its pipe (two more file descriptors) for as long as it
// waits for data, so a plain io.Copy costs 6 descriptors per idle proxied
// connection (inetaf/tcpproxy#31), and a proxy holding 10,000 idle connections
// needs 60,000. So proxyCopy waits for data without a pipe (waitData), then
// splices exactly the bytes that are queued (io.CopyN, still splice), and gives
// the pipe back: an idle connection costs its two sockets and nothing else.
//
// An error (a reset, or the proxier aborting the connection) aborts both sides:
// the other direction has nothing left to wait for, and a peer must not mistake
// the end for a clean one.
func proxyCopy(c *tcpConn, dst, src *net.TCPConn, bytes *atomic.Uint64) {
	rc, err := src.SyscallConn() // once per connection, not per wait
	if err != nil {
		c.abort()
		return
	}
	for {
		queued, err := waitData(rc)
		if err != nil {
			c.abort()
			return
		}
		if queued == 0 { // the end of the stream: pass the FIN on
			dst.CloseWrite()
			return
		}
		n, err := io.CopyN(dst, src, int64(queued))
		bytes.Add(uint64(n))
		if err != nil {
			c.abort()
			return
		}
	}
}

// waitData blocks (in Go's poller, like a Read) until c has data or has ended,
// and returns how many bytes are queued: 0 means the peer closed its side.
func waitData(rc syscall.RawConn) (int, error) {
	var queued int
	var opErr error
	err := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		for {
			n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.EAGAIN):
				return false // nothing yet: park until the poller says readable
			case err != nil:
				opErr = err
			case n > 0:
				queued, opErr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
				queued = max(queued, 1)
			}
			return true
		}
	})
	return queued, errors.Join(err, opErr)
}
