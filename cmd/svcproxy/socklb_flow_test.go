package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// flow is a client process in a cgroup that connects to one address every
// 10 ms (or as paced) until stopped: traffic across a restart.
type flow struct {
	stopFile string
	paceFile string // its content, a time.Duration, replaces the 10 ms
	done     chan error

	mu    sync.Mutex
	dials []dial
}

// startDialing starts TestHelperDial in ns, born in cg, dialing addr until
// stop.
func startDialing(t *testing.T, ns *netnstest.NS, cg *testCgroup, addr string) *flow {
	t.Helper()
	dir := t.TempDir()
	f := &flow{stopFile: filepath.Join(dir, "stop"), paceFile: filepath.Join(dir, "pace"), done: make(chan error, 1)}
	cmd := ns.Command(context.Background(), os.Args[0], "-test.run=^TestHelperDial$")
	cmd.Env = append(os.Environ(), "SVCPROXY_DIAL="+addr, "SVCPROXY_DIAL_UNTIL="+f.stopFile, "SVCPROXY_DIAL_PACE="+f.paceFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.dir.Fd())}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			var d dial
			switch {
			case len(fl) == 2 && fl[0] == "error":
				d.err = fl[1]
			case len(fl) == 3:
				d = dial{backend: fl[0], client: fl[1], peer: fl[2]}
			case len(fl) == 2: // an echo server's greeting: its name only
				d = dial{backend: fl[0], peer: fl[1]}
			default:
				d.err = "unreadable:" + sc.Text()
			}
			f.mu.Lock()
			f.dials = append(f.dials, d)
			f.mu.Unlock()
		}
		f.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if f.stopFile != "" {
			os.WriteFile(f.stopFile, nil, 0o644)
			cmd.Process.Kill()
			<-f.done
		}
	})
	return f
}

func (f *flow) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.dials)
}

// waitFor waits until the flow has made n connects.
func (f *flow) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for f.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the flow made %d connects in a minute, want %d", f.count(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pace makes the flow wait d between connects from its next one on.
func (f *flow) pace(t *testing.T, d time.Duration) {
	t.Helper()
	replaceFile(t, f.paceFile, d.String())
}

// stop ends the flow and returns its connects.
func (f *flow) stop(t *testing.T) []dial {
	t.Helper()
	if err := os.WriteFile(f.stopFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-f.done; err != nil {
		t.Errorf("the flow's client: %v", err)
	}
	f.stopFile = ""
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials
}

// newTestBPFFS mounts a bpffs of the test's own (each bpf mount is an
// instance of its own, so nothing pinned there is seen elsewhere) and
// unmounts it at the end.
func newTestBPFFS(t *testing.T) string {
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
	return dir
}

// checkFlow fails the test for every connect of dials that failed, and
// returns how many were not translated (answered by the pod's own VIP
// listener rather than one of backends), after logging the counts.
func checkFlow(t *testing.T, what string, dials []dial, backends map[string]bool) (untranslated int) {
	t.Helper()
	failed := 0
	for _, d := range dials {
		switch {
		case d.err != "":
			failed++
			t.Errorf("%s, a connect failed: %+v", what, d)
		case !backends[d.backend]:
			untranslated++
		}
	}
	t.Logf("%s: %d connects, %d failed, %d untranslated", what, len(dials), failed, untranslated)
	return untranslated
}

// waitOnly waits until 20 connects from cg to addr in a row reach the
// backends want and no other (the maps carry the change).
func waitOnly(t *testing.T, ns *netnstest.NS, cg *testCgroup, addr string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		seen := map[string]bool{}
		for _, d := range dialFromCgroup(t, ns, cg, addr, 20) {
			seen[d.backend+d.err] = true
		}
		ok := len(seen) <= len(want)
		for b := range seen {
			ok = ok && slices.Contains(want, b)
		}
		if ok && len(want) == 1 || ok && len(seen) == len(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connects to %s reach %v, want %v only", addr, seen, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// replaceFile replaces path's content atomically (a rename), as the file
// source's reload expects of an editor or a tool.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// testCgroup is a cgroup v2 directory made by a test, removed at its end.
type testCgroup struct {
	path string
	dir  *os.File // open, for CLONE_INTO_CGROUP and queries
}

// newTestCgroup makes a child of the machine's cgroup2 mount
// (netnstest.Cgroup2: no mount of the test's own, which a lab coming up
// beside it would see). Nothing runs in it but the test's clients.
// Cleanups run last in, first out: svcproxy (started later) has stopped and
// its programs are detached before the child is removed.
func newTestCgroup(t *testing.T) *testCgroup {
	t.Helper()
	mnt := netnstest.Cgroup2(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	path := filepath.Join(mnt, "svcp-socklb-"+hex.EncodeToString(b[:]))
	dir, err := netnstest.MakeCgroup(t, path)
	if err != nil {
		t.Fatalf("make a cgroup2 directory: %v", err)
	}
	return &testCgroup{path: path, dir: dir}
}

// checkDetached checks that no socket-LB program is attached to cg (any hook
// kernel/socklb uses) and that the pin directory pin is gone.
func checkDetached(t *testing.T, cg *testCgroup, pin string) {
	t.Helper()
	for _, at := range []ebpf.AttachType{ebpf.AttachCGroupInet4Connect, ebpf.AttachCGroupInet6Connect,
		ebpf.AttachCGroupUDP4Sendmsg, ebpf.AttachCGroupUDP6Sendmsg, ebpf.AttachCGroupUDP4Recvmsg, ebpf.AttachCGroupUDP6Recvmsg,
		ebpf.AttachCgroupInet4GetPeername, ebpf.AttachCgroupInet6GetPeername} {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.dir.Fd()), Attach: at})
		if err != nil {
			t.Fatalf("query the cgroup's %v programs: %v", at, err)
		}
		if len(res.Programs) != 0 {
			t.Errorf("%d %v programs still attached to %s", len(res.Programs), at, cg.path)
		}
	}
	if _, err := os.Stat(pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pin directory %s: %v, want it gone", pin, err)
	}
}
