package socklb

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// TestKernelPinRestart: with Config.PinPath, a client in the cgroup connects
// to a Service over and over while the Kernel is closed (no process holds
// the programs or the maps: the pins do) and a new Kernel adopts the pins;
// not one connect fails or goes untranslated. The new Kernel finds the
// Service in the adopted maps and changes it. A process in a cgroup outside
// the attached subtree connects to the VIP itself. Cleanup then leaves
// nothing attached to the cgroup and nothing in the bpffs, and connect() in
// the cgroup is untranslated.
func TestKernelPinRestart(t *testing.T) {
	netnstest.RequireRoot(t)
	cg := newCgroup(t)
	outside := newCgroup(t) // a sibling of cg: outside the attached subtree
	cfg := Config{CgroupPath: cg.path, PinPath: newBPFFS(t)}
	var open []*Kernel // closed at the end if the test did not
	t.Cleanup(func() {
		for _, k := range open {
			k.Close()
		}
		_ = Cleanup(cfg) // detach even when the test failed (before the cgroup goes)
	})
	newPinned := func() *Kernel {
		t.Helper()
		k, err := New(cfg)
		if err != nil {
			skipIfRefused(t, "socklb.New", err)
		}
		open = append(open, k)
		return k
	}
	closeKernel := func(k *Kernel) {
		t.Helper()
		must(t, k.Close())
		open = slices.DeleteFunc(open, func(o *Kernel) bool { return o == k })
	}

	ctx := context.Background()
	ns := netnstest.New(t)
	vip := netip.MustParseAddrPort("198.18.0.40:80")
	addAddr(t, ns, vip.Addr())
	serve(t, ns, vip.String(), "vip")
	names := []string{"198.19.0.1", "198.19.0.2", "198.19.0.3"}
	var e Entry
	for _, b := range names {
		a := netip.MustParseAddr(b)
		addAddr(t, ns, a)
		e.Backends = append(e.Backends, netip.AddrPortFrom(a, 8080))
		serve(t, ns, e.Backends[len(e.Backends)-1].String(), b)
	}
	web := Service{VIP: vip.Addr(), Port: 80, Protocol: TCP}

	k1 := newPinned()
	must(t, k1.SetService(ctx, web, e))
	c := startClient(t, ns, cg, vip.String())
	c.waitLines(t, 50)
	closeKernel(k1)
	c.waitLines(t, 50) // translated with no process holding anything
	k2 := newPinned()
	svcs, err := k2.Services(ctx)
	must(t, err)
	if got := svcs[web]; len(svcs) != 1 || !slices.Equal(got.Backends, e.Backends) {
		t.Errorf("the new Kernel's Services() = %v, want the adopted %s: %v", svcs, web, e)
	}
	c.waitLines(t, 50)
	must(t, k2.SetService(ctx, web, Entry{Backends: e.Backends[:1]}))
	c.waitLines(t, 50)
	lines := c.stop(t)

	// Another process's view: the pinned maps, read-only.
	p, err := OpenPinned(cfg.PinPath)
	must(t, err)
	pinned, err := p.Dump(ctx)
	must(t, err)
	pinnedCounts, err := p.Connections(ctx)
	must(t, err)
	must(t, p.Close())
	own, err := k2.Dump(ctx)
	must(t, err)
	ownCounts, err := k2.Connections(ctx)
	must(t, err)
	if pinnedCounts[web] == 0 || pinnedCounts[web] != ownCounts[web] {
		t.Errorf("the pinned counts map read from outside says %d connect()s to %s, the Kernel %d: want the same, more than 0", pinnedCounts[web], web, ownCounts[web])
	}
	if len(pinned.Services) != 1 || !slices.Equal(pinned.Services[0].Backends, own.Services[0].Backends) || len(pinned.RevNAT) == 0 {
		t.Errorf("the pinned maps read from outside:\n%s\nwant the Kernel's Service and revnat entries:\n%s", pinned, own)
	}
	got := countLines(strings.Join(lines, "\n"))
	if got["vip"] != 0 || len(lines) < 200 {
		t.Errorf("%d connects across the restart reached %v, want at least 200, none untranslated (vip)", len(lines), got)
	}
	if last := countLines(strings.Join(lines[len(lines)-10:], "\n")); last[names[0]] != 10 {
		t.Errorf("the last 10 connects, after the new Kernel kept only %s, reached %v", names[0], last)
	}
	t.Logf("%d connects across close and adoption, 0 failed: %v", len(lines), got)

	if got := dialFrom(t, ns, outside, vip.String(), 1); got != "vip" {
		t.Errorf("from a cgroup outside the attached subtree, connect(%s) reached %q, want the VIP's own listener", vip, got)
	}

	// A Kernel whose configuration no longer matches the pins refuses them.
	for _, bad := range []Config{
		{CgroupPath: outside.path, PinPath: cfg.PinPath},
		{CgroupPath: cg.path, PinPath: cfg.PinPath, MaxServices: 1024},
	} {
		if k, err := New(bad); err == nil || !strings.Contains(err.Error(), "config: ") {
			if k != nil {
				open = append(open, k)
			}
			t.Errorf("New(%+v) over the pins of %+v = %v, want a config error", bad, cfg, err)
		}
	}

	closeKernel(k2)
	if got := dialFrom(t, ns, cg, vip.String(), 1); got != names[0] {
		t.Errorf("after Close, connect(%s) reached %q, want %s (the pins keep the programs attached)", vip, got, names[0])
	}
	must(t, Cleanup(cfg))
	for _, h := range hooks {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.dir.Fd()), Attach: h.attach})
		must(t, err)
		if len(res.Programs) != 0 {
			t.Errorf("after Cleanup, %d programs still attached at %s", len(res.Programs), h.name)
		}
	}
	if left, err := os.ReadDir(cfg.PinPath); err != nil || len(left) != 0 {
		t.Errorf("after Cleanup, the bpffs holds %v (%v), want nothing", left, err)
	}
	if got := dialFrom(t, ns, cg, vip.String(), 1); got != "vip" {
		t.Errorf("after Cleanup, connect(%s) reached %q, want the VIP (untranslated)", vip, got)
	}
	must(t, Cleanup(cfg)) // nothing left: not an error
}

// newBPFFS mounts a bpffs of the test's own on a temporary directory and
// unmounts it at the end (taking whatever is still pinned with it). It
// returns a directory made in it: a bpffs root holds the kernel's own
// maps.debug and progs.debug besides.
func newBPFFS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Skipf("mount -t bpf refused: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount bpffs at %s: %v", dir, err)
		}
	})
	pins := filepath.Join(dir, "svcproxy")
	must(t, os.Mkdir(pins, 0o700))
	return pins
}

// client is a test binary dialing a TCP address in a loop, inside a cgroup,
// until stop: each connect's line is collected as it comes.
type client struct {
	cmd    *os.Process
	stdin  io.Closer
	stderr *bytes.Buffer
	done   chan error // the process's exit

	mu    sync.Mutex
	lines []string
	seen  int // lines already waited for
	more  chan struct{}
}

func startClient(t *testing.T, ns *netnstest.NS, cg *cgroup, addr string) *client {
	t.Helper()
	cmd := ns.Command(context.Background(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), dialEnv+"="+addr, countEnv+"=-1", modeEnv+"=tcp")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.dir.Fd())}
	c := &client{stderr: new(bytes.Buffer), done: make(chan error, 1), more: make(chan struct{}, 1)}
	cmd.Stderr = c.stderr
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	c.cmd, c.stdin = cmd.Process, stdin
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
			select {
			case c.more <- struct{}{}:
			default:
			}
		}
		c.done <- cmd.Wait()
	}()
	return c
}

// waitLines waits for n more lines than the last wait saw; the client
// exiting first (a connect failed) fails the test.
func (c *client) waitLines(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		c.mu.Lock()
		got := len(c.lines)
		c.mu.Unlock()
		if got >= c.seen+n {
			c.seen = got
			return
		}
		select {
		case <-c.more:
		case err := <-c.done:
			t.Fatalf("the client exited after %d connects: %v: %s", got, err, c.stderr)
		case <-deadline:
			t.Fatalf("the client made %d connects, waiting for %d", got, c.seen+n)
		}
	}
}

// stop closes the client's stdin and returns every line once it exited;
// an exit other than 0 (a connect failed) fails the test.
func (c *client) stop(t *testing.T) []string {
	t.Helper()
	c.stdin.Close()
	if err := <-c.done; err != nil {
		t.Fatalf("the client: %v: %s", err, c.stderr)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lines)
}
