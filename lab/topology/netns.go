package topology

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/nsenter"
)

// NetnsDir is where `ip netns add` pins named namespaces.
const NetnsDir = "/run/netns"

// EtcNetnsDir holds per-namespace files that `ip netns exec` bind-mounts over
// /etc (resolv.conf).
const EtcNetnsDir = "/etc/netns"

// Namespaces lists the named network namespaces that start with prefix.
func Namespaces(prefix string) ([]string, error) {
	des, err := os.ReadDir(NetnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, de := range des {
		if strings.HasPrefix(de.Name(), prefix) {
			out = append(out, de.Name())
		}
	}
	return out, nil
}

// NSPids lists the processes whose network namespace is the named one, as
// `ip netns pids` does. Zombies have no namespace and are not listed.
func NSPids(ns string) ([]int, error) {
	var want unix.Stat_t
	if err := unix.Stat(filepath.Join(NetnsDir, ns), &want); err != nil {
		return nil, fmt.Errorf("namespace %s: %w", ns, err)
	}
	des, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, de := range des {
		pid, err := strconv.Atoi(de.Name())
		if err != nil || pid == os.Getpid() {
			continue // svclab itself is never one of the lab's processes
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", de.Name(), "ns/net"), &st) != nil {
			continue
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// InNamespace reports whether process pid lives in namespace ns: its
// /proc/PID/ns/net is the namespace's file (same device and inode).
func InNamespace(pid int, ns string) bool {
	var want, st unix.Stat_t
	if unix.Stat(filepath.Join(NetnsDir, ns), &want) != nil ||
		unix.Stat(filepath.Join("/proc", strconv.Itoa(pid), "ns/net"), &st) != nil {
		return false // no namespace, or no such process (a zombie has no ns link either)
	}
	return st.Dev == want.Dev && st.Ino == want.Ino
}

// DialIn dials addr from inside namespace ns. The socket is made on a thread
// that entered the namespace (package nsenter brings the thread back); the
// connection is then usable from any goroutine.
func DialIn(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := nsenter.Run(filepath.Join(NetnsDir, ns), func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// NetnsCookie is what bpf_get_netns_cookie returns for a socket of
// namespace ns: the kernel's cookie of that network namespace
// (SO_NETNS_COOKIE, Linux 5.14), the key of the socket LB's ClientIP
// affinity. 0 if it cannot be read.
func NetnsCookie(ns string) uint64 {
	var cookie uint64
	_ = nsenter.Run(filepath.Join(NetnsDir, ns), func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		cookie = v
		return err
	})
	return cookie
}
