package socklb

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// TestKernelConnect: in a namespace of the test's own, processes inside a
// cgroup of the test's own connect to a Service address and reach its
// backends, spread over all of them; a process outside the cgroup connecting
// to the same address is not translated (it reaches a listener on the VIP
// itself, there to tell the two apart). After DeleteService the process
// inside is not translated either. Once over IPv4 (connect4), once over IPv6
// (connect6).
func TestKernelConnect(t *testing.T) {
	netnstest.RequireRoot(t)
	cg := newCgroup(t)
	k := newKernel(t, cg.path)
	ns := netnstest.New(t)
	for _, fam := range []struct {
		name     string
		vip      string
		backends []string
	}{
		{"IPv4", "198.18.0.10", []string{"198.19.0.1", "198.19.0.2", "198.19.0.3"}},
		{"IPv6", "2001:db8:18::10", []string{"2001:db8:19::1", "2001:db8:19::2", "2001:db8:19::3"}},
	} {
		t.Run(fam.name, func(t *testing.T) {
			ctx := context.Background()
			vip := netip.AddrPortFrom(netip.MustParseAddr(fam.vip), 80)
			addAddr(t, ns, vip.Addr())
			serve(t, ns, vip.String(), "vip")
			var e Entry
			for _, b := range fam.backends {
				a := netip.MustParseAddr(b)
				addAddr(t, ns, a)
				e.Backends = append(e.Backends, netip.AddrPortFrom(a, 8080))
				serve(t, ns, e.Backends[len(e.Backends)-1].String(), b)
			}
			web := Service{VIP: vip.Addr(), Port: 80, Protocol: TCP}
			must(t, k.SetService(ctx, web, e))
			svcs, err := k.Services(ctx)
			must(t, err)
			if got := svcs[web]; !slices.Equal(got.Backends, e.Backends) || got.AffinityTimeout != 0 {
				t.Fatalf("Services()[%s] = %v, want %v", web, got, e)
			}

			// 60 connects miss one of 3 backends with probability 3*(2/3)^60, about 1e-10.
			got := countLines(dialFrom(t, ns, cg, vip.String(), 60))
			if len(got) != len(fam.backends) {
				t.Errorf("inside the cgroup, 60 connects to %s reached %v, want each of %v", vip, got, fam.backends)
			}
			if got := dialFrom(t, ns, nil, vip.String(), 1); got != "vip" {
				t.Errorf("outside the cgroup, connect(%s) reached %q, want the VIP's own listener (untranslated)", vip, got)
			}
			must(t, k.DeleteService(ctx, web))
			if got := dialFrom(t, ns, cg, vip.String(), 1); got != "vip" {
				t.Errorf("after DeleteService, inside the cgroup, connect(%s) reached %q, want the VIP (untranslated)", vip, got)
			}
			if svcs, err := k.Services(ctx); err != nil || len(svcs) != 0 {
				t.Errorf("after DeleteService, Services() = %v, %v; want none", svcs, err)
			}
		})
	}
}

// countLines counts the lines of out by their text.
func countLines(out string) map[string]int {
	n := make(map[string]int)
	for _, l := range strings.Fields(out) {
		n[l]++
	}
	return n
}

// TestKernelAttachTypes records which cgroup sock_addr hooks this kernel loads
// and attaches, Kernel's eight hooks among them: a program that only
// returns 1 ("go on"), attached to the test's cgroup and detached.
func TestKernelAttachTypes(t *testing.T) {
	netnstest.RequireRoot(t)
	cg := newCgroup(t)
	for _, at := range []struct {
		name string
		typ  ebpf.AttachType
	}{
		{"connect4", ebpf.AttachCGroupInet4Connect},
		{"connect6", ebpf.AttachCGroupInet6Connect},
		{"sendmsg4", ebpf.AttachCGroupUDP4Sendmsg},
		{"sendmsg6", ebpf.AttachCGroupUDP6Sendmsg},
		{"recvmsg4", ebpf.AttachCGroupUDP4Recvmsg},
		{"recvmsg6", ebpf.AttachCGroupUDP6Recvmsg},
		{"getpeername4", ebpf.AttachCgroupInet4GetPeername},
		{"getpeername6", ebpf.AttachCgroupInet6GetPeername},
	} {
		t.Run(at.name, func(t *testing.T) {
			prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
				Type:         ebpf.CGroupSockAddr,
				AttachType:   at.typ,
				Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()},
				License:      "Apache-2.0",
			})
			if err != nil {
				skipIfRefused(t, "load "+at.name, err)
			}
			defer prog.Close()
			l, err := link.AttachCgroup(link.CgroupOptions{Path: cg.path, Attach: at.typ, Program: prog})
			if err != nil {
				skipIfRefused(t, "attach "+at.name, err)
			}
			must(t, l.Close())
		})
	}
}

// skipIfRefused skips when the kernel refuses (naming the errno) and fails on
// anything else, a verifier rejection above all: that is a bug of the program.
func skipIfRefused(t *testing.T, what string, err error) {
	t.Helper()
	var verr *ebpf.VerifierError
	if errors.As(err, &verr) {
		t.Fatalf("%s: the verifier refused the program: %+v", what, verr)
	}
	for _, errno := range []error{unix.EPERM, unix.EINVAL, unix.EOPNOTSUPP, unix.ENOSYS, ebpf.ErrNotSupported} {
		if errors.Is(err, errno) {
			t.Skipf("%s: this kernel refuses: %v", what, err)
		}
	}
	t.Fatalf("%s: %v", what, err)
}

func newKernel(t *testing.T, cgroup string) *Kernel {
	t.Helper()
	k, err := New(Config{CgroupPath: cgroup})
	if err != nil {
		skipIfRefused(t, "socklb.New", err)
	}
	t.Cleanup(func() {
		if err := k.Close(); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	return k
}

// addAddr adds a to ns's loopback as a host address; netnstest's AddAddr
// returns once an IPv6 one is usable (not tentative, its local route in).
func addAddr(t *testing.T, ns *netnstest.NS, a netip.Addr) {
	t.Helper()
	ns.AddAddr(t, "lo", netip.PrefixFrom(a, a.BitLen()))
}

// serve listens on addr inside ns and answers every connection with reply.
func serve(t *testing.T, ns *netnstest.NS, addr, reply string) {
	t.Helper()
	var ln net.Listener
	must(t, ns.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }))
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed at cleanup
			}
			_, _ = c.Write([]byte(reply + "\n"))
			c.Close()
		}
	}()
}

// dialFrom runs this test binary as a client in ns, inside cg (or where the
// test itself runs, when cg is nil), which connects to addr count times, and
// returns what the servers it reached said, a line each.
func dialFrom(t *testing.T, ns *netnstest.NS, cg *cgroup, addr string, count int) string {
	t.Helper()
	return clientFrom(t, ns, cg, "tcp", addr, count)
}

// clientFrom runs this test binary as a client of the given mode (see
// client_test.go) in ns, inside cg (or where the test itself runs, when cg
// is nil), count times, and returns what it printed, a line each.
func clientFrom(t *testing.T, ns *netnstest.NS, cg *cgroup, mode, addr string, count int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := ns.Command(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), dialEnv+"="+addr, countEnv+"="+strconv.Itoa(count), modeEnv+"="+mode)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if cg != nil {
		// clone3(CLONE_INTO_CGROUP): the child is born in the cgroup, so the
		// socket it creates is the hook's from the start.
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.dir.Fd())}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client dialing %s: %v: %s", addr, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// cgroup is a cgroup v2 directory made by a test, removed at its end.
type cgroup struct {
	path string
	dir  *os.File // open, for CLONE_INTO_CGROUP
}

// newCgroup makes a child cgroup of the cgroup2 hierarchy: under its mount
// when there is one (these machines mount an empty one at
// /sys/fs/cgroup/unified beside v1), else under a mount of the test's own.
// Nothing runs in it but the test's children, and it is removed at cleanup,
// after the program attached to it is detached (cleanups run last in, first
// out) and its processes have exited.
func newCgroup(t *testing.T) *cgroup {
	t.Helper()
	root := cgroup2Mount(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	path := filepath.Join(root, "svcp-socklb-"+hex.EncodeToString(b[:]))
	dir, err := netnstest.MakeCgroup(t, path)
	if err != nil {
		t.Skipf("cannot make a cgroup2 directory: %v", err)
	}
	return &cgroup{path: path, dir: dir}
}

// cgroup2Mount is the machine's cgroup2 mount (netnstest.Cgroup2).
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	return netnstest.Cgroup2(t)
}
