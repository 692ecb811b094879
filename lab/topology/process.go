package topology

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// WaitExit waits up to d for process pid to exit, without polling: a pidfd
// becomes readable when its process ends. It reports whether it did.
func WaitExit(pid int, d time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return errors.Is(err, unix.ESRCH) // already gone
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}

// Alive reports whether pid runs (a zombie does not count).
func Alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// StopPids sends SIGTERM to pids, waits up to grace for them, then SIGKILLs
// the rest and waits for those too.
func StopPids(pids []int, grace time.Duration) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	var left []int
	deadline := time.Now().Add(grace)
	for _, pid := range pids {
		if !WaitExit(pid, time.Until(deadline)) {
			left = append(left, pid)
		}
	}
	var errs []error
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !WaitExit(pid, 5*time.Second) {
			errs = append(errs, fmt.Errorf("process %d: still running after SIGKILL", pid))
		}
	}
	return errors.Join(errs...)
}
