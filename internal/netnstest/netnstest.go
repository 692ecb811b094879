// Package netnstest gives tests throwaway Linux network namespaces: the only
// place where svcproxy's tests change iptables, routes or links, and the only
// place (besides loopback) where they send traffic.
//
// A namespace is created with `ip netns add`, has its loopback up and no route
// out, and is removed with everything started in it when the test ends, also
// when it fails. Tests that need it call RequireRoot first, which skips them
// with a message when they cannot run (not root, or a tool is missing).
package netnstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/nsenter"
)

// RequireRoot skips the test unless it runs as root with `ip` and every named
// tool on PATH.
func RequireRoot(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces (run `make test` as root)")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH (make test installs it)", tool)
		}
	}
}

// NS is a network namespace owned by one test.
type NS struct {
	Name string

	mu    sync.Mutex
	procs []*exec.Cmd
}

// New creates a fresh namespace "svcp-<random>" with loopback up. It is
// deleted, and every process started in it with Start killed, at cleanup.
func New(t testing.TB) *NS {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := &NS{Name: "svcp-" + hex.EncodeToString(b[:])}
	if out, err := exec.Command("ip", "netns", "add", n.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", n.Name, err, out)
	}
	t.Cleanup(func() { n.remove(t) })
	n.Run(t, "ip", "link", "set", "lo", "up")
	return n
}

func (n *NS) remove(t testing.TB) {
	n.mu.Lock()
	procs := n.procs
	n.procs = nil
	n.mu.Unlock()
	for _, c := range procs {
		if c.Process != nil {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	// Anything else still running inside (a child of a child) goes too, or the
	// namespace would outlive the test.
	if out, err := exec.Command("ip", "netns", "pids", n.Name).Output(); err == nil {
		for _, pid := range strings.Fields(string(out)) {
			// Our own pid shows up when Do's thread was the main thread, which Go
			// keeps (wedged) instead of ending it: never kill ourselves.
			var p int
			if _, err := fmt.Sscan(pid, &p); err == nil && p != os.Getpid() {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		t.Errorf("ip netns del %s: %v: %s", n.Name, err, out)
	}
	_ = os.RemoveAll(filepath.Join("/etc/netns", n.Name))
}

// Do runs fn on an OS thread that has entered the namespace (see package
// nsenter). Sockets created by fn stay in the namespace after Do returns, so a
// test can listen or dial "inside" and then use the socket from any
// goroutine. Processes started by fn with os/exec are forked from this thread
// and so inherit the namespace too.
func (n *NS) Do(fn func() error) error {
	return nsenter.Run(filepath.Join("/run/netns", n.Name), fn)
}

// Command returns `ip netns exec NAME name args...`.
func (n *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Run runs a command in the namespace, fails the test if it fails, and returns
// its combined output.
func (n *NS) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := n.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s %s: %v\n%s", n.Name, name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Start starts a background process in the namespace; it is killed at cleanup
// (or earlier by the test). Its output goes to the test log when it fails.
func (n *NS) Start(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := n.Command(context.Background(), name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("in %s: start %s: %v", n.Name, name, err)
	}
	n.mu.Lock()
	n.procs = append(n.procs, cmd)
	n.mu.Unlock()
	t.Cleanup(func() {
		if t.Failed() && out.Len() > 0 {
			t.Logf("output of %s %s in %s:\n%s", name, strings.Join(args, " "), n.Name, out.String())
		}
	})
	return cmd
}

// ResolvConf gives the namespace its own resolv.conf: `ip netns exec` (and so
// Command, Run and Start) bind-mounts /etc/netns/NAME/resolv.conf over
// /etc/resolv.conf. The directory goes with the namespace.
func (n *NS) ResolvConf(t testing.TB, conf string) {
	t.Helper()
	dir := filepath.Join("/etc/netns", n.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Sysctl sets a net.* sysctl inside the namespace.
func (n *NS) Sysctl(t testing.TB, key, value string) {
	t.Helper()
	if !strings.HasPrefix(key, "net.") {
		t.Fatalf("sysctl %s: only net.* keys are per namespace", key)
	}
	n.Run(t, "sysctl", "-qw", key+"="+value)
}

// Veth connects two namespaces with a veth pair, addresses both ends and
// brings them up. Interface names must be unique within their namespace.
func Veth(t testing.TB, a *NS, aIf string, aAddr netip.Prefix, b *NS, bIf string, bAddr netip.Prefix) {
	t.Helper()
	// Create in a and move the peer to b, so no name ever exists in the host.
	a.Run(t, "ip", "link", "add", aIf, "type", "veth", "peer", "name", bIf, "netns", b.Name)
	a.AddAddr(t, aIf, aAddr)
	a.Run(t, "ip", "link", "set", aIf, "up")
	b.AddAddr(t, bIf, bAddr)
	b.Run(t, "ip", "link", "set", bIf, "up")
}

// AddAddr adds an address to a link of the namespace and returns once it is
// usable. An IPv6 address is added without duplicate address detection
// ("nodad"): a tentative address can neither be bound nor used as a source
// for a second or two, which would make a test wait or fail for nothing
// (nobody else is on the link). Even so the kernel finishes it a little
// later, from a work queue (addrconf_dad_work: the tentative flag cleared,
// then the address's route put in the local table), and until then
// connect() to it fails with "network is unreachable": seen under load. So
// AddAddr waits for both (waitAddr6). With nodad the work does not wait for
// the link (addrconf_dad_begin completes a nodad address before it checks
// that the link is ready), so this holds on a link that is still down too.
// An IPv4 address is complete when `ip addr add` returns.
func (n *NS) AddAddr(t testing.TB, dev string, p netip.Prefix) {
	t.Helper()
	args := []string{"addr", "add", p.String(), "dev", dev}
	if p.Addr().Is6() {
		args = append(args, "nodad")
	}
	n.Run(t, "ip", args...)
	if p.Addr().Is6() {
		n.waitAddr6(t, dev, p.Addr())
	}
}

// addrUsableTimeout bounds waitAddr6: the kernel's work queue runs within
// milliseconds on a quiet machine; 30 s leaves room for a loaded one.
const addrUsableTimeout = 30 * time.Second

// waitAddr6 polls until the IPv6 address a on dev is no longer tentative and
// its route is in the local table, or fails the test after
// addrUsableTimeout, showing the addresses and the local table.
func (n *NS) waitAddr6(t testing.TB, dev string, a netip.Addr) {
	t.Helper()
	host := netip.PrefixFrom(a, 128).String()
	usable := func() bool {
		return strings.TrimSpace(n.Run(t, "ip", "-6", "-o", "addr", "show", "dev", dev, "to", host, "tentative")) == "" &&
			strings.TrimSpace(n.Run(t, "ip", "-6", "route", "show", "table", "local", host)) != ""
	}
	for deadline := time.Now().Add(addrUsableTimeout); !usable(); {
		if time.Now().After(deadline) {
			t.Fatalf("in %s: IPv6 address %s on %s not usable after %s (tentative, or no route in the local table):\n%s\n%s", n.Name, a, dev, addrUsableTimeout,
				n.Run(t, "ip", "-6", "addr", "show", "dev", dev), n.Run(t, "ip", "-6", "route", "show", "table", "local"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// DialDropped makes one TCP connection from n to dst (IPv4) with a one-second
// timeout and returns an error if something answered: for destinations whose
// SYN a rule must drop (a source range, a firewall). A refused or timed-out
// dial is the expected outcome and returns nil.
func (n *NS) DialDropped(dst string) error {
	var c net.Conn
	_ = n.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", dst, time.Second)
		return err
	})
	if c != nil {
		c.Close()
		return errors.New("a backend answered " + dst + ", want the SYN dropped")
	}
	return nil
}

// MakeCgroup makes the cgroup v2 directory path (its parent must be in a
// cgroup2 hierarchy) and returns it open, for CLONE_INTO_CGROUP
// (syscall.SysProcAttr's UseCgroupFD and CgroupFD). At the test's cleanup it
// is closed and removed; a reaped task may leave the cgroup a moment after
// its parent waited for it, so rmdir is retried while it says EBUSY (for up
// to 10 seconds). The error is only mkdir's or open's: the caller decides
// whether that skips or fails the test.
func MakeCgroup(tb testing.TB, path string) (*os.File, error) {
	tb.Helper()
	if err := os.Mkdir(path, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.Open(path)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	tb.Cleanup(func() {
		dir.Close()
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.Remove(path)
			if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				if err != nil {
					tb.Errorf("remove cgroup %s: %v", path, err)
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return dir, nil
}
