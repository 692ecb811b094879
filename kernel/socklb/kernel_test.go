package socklb

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
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

// dialEnv makes the test binary a client instead (see TestMain): it dials the
// address, prints the line the server sends and exits. Tests run it as a child
// process inside their cgroup, or outside it.
const dialEnv = "SOCKLB_TEST_DIAL"

func TestMain(m *testing.M) {
	if addr := os.Getenv(dialEnv); addr != "" {
		os.Exit(dialAndPrint(addr))
	}
	os.Exit(m.Run())
}

func dialAndPrint(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Print(line)
	return 0
}

// TestKernelConnect4: in a namespace of the test's own, a process inside a
// cgroup of the test's own connects to a Service address and reaches the
// backend; a process outside the cgroup connecting to the same address is not
// translated (it reaches a listener on the VIP itself, there to tell the two
// apart). After DeleteService the process inside is not translated either.
func TestKernelConnect4(t *testing.T) {
	netnstest.RequireRoot(t)
	cg := newCgroup(t)
	k := newKernel(t, cg.path)
	ns := netnstest.New(t)
	ns.AddAddr(t, "lo", netip.MustParsePrefix("198.19.0.2/32"))
	ns.AddAddr(t, "lo", netip.MustParsePrefix("198.18.0.10/32"))
	serve(t, ns, "198.19.0.2:8080", "backend")
	serve(t, ns, "198.18.0.10:80", "vip")

	ctx := context.Background()
	web := Service{VIP: netip.MustParseAddr("198.18.0.10"), Port: 80, Protocol: TCP}
	must(t, k.SetService(ctx, web, netip.MustParseAddrPort("198.19.0.2:8080")))
	svcs, err := k.Services(ctx)
	must(t, err)
	if got := svcs[web].String(); len(svcs) != 1 || got != "198.19.0.2:8080" {
		t.Fatalf("Services() = %v, want %s -> 198.19.0.2:8080", svcs, web)
	}

	if got := dialFrom(t, ns, cg, "198.18.0.10:80"); got != "backend" {
		t.Errorf("inside the cgroup, connect(198.18.0.10:80) reached %q, want the backend", got)
	}
	if got := dialFrom(t, ns, nil, "198.18.0.10:80"); got != "vip" {
		t.Errorf("outside the cgroup, connect(198.18.0.10:80) reached %q, want the VIP's own listener (untranslated)", got)
	}
	must(t, k.DeleteService(ctx, web))
	if got := dialFrom(t, ns, cg, "198.18.0.10:80"); got != "vip" {
		t.Errorf("after DeleteService, inside the cgroup, connect(198.18.0.10:80) reached %q, want the VIP (untranslated)", got)
	}
}

// TestKernelAttachTypes records which cgroup sock_addr hooks this kernel loads
// and attaches, for the programs to come (issue 31): a program that only
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
// test itself runs, when cg is nil), and returns what the server it reached
// said.
func dialFrom(t *testing.T, ns *netnstest.NS, cg *cgroup, addr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := ns.Command(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), dialEnv+"="+addr)
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
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Skipf("cannot make a cgroup2 directory: %v", err)
	}
	dir, err := os.Open(path)
	if err != nil {
		os.Remove(path)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dir.Close()
		// The clients were waited for, but a reaped task may leave the
		// cgroup a moment later: rmdir says EBUSY until then.
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.Remove(path)
			if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				if err != nil {
					t.Errorf("remove cgroup %s: %v", path, err)
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	return &cgroup{path: path, dir: dir}
}

func cgroup2Mount(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		// "36 25 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw"
		f := strings.Fields(line)
		if i := slices.Index(f, "-"); i > 4 && i+1 < len(f) && f[i+1] == "cgroup2" && f[3] == "/" {
			return f[4]
		}
	}
	dir := t.TempDir()
	if err := unix.Mount("none", dir, "cgroup2", 0, ""); err != nil {
		t.Skipf("no cgroup2 mount, and mount -t cgroup2 refused: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount cgroup2 at %s: %v", dir, err)
		}
	})
	return dir
}
