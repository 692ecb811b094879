package netnstest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// LabLock is the lock the lab's tests (test/lab) and `svclab up` by hand
// hold: the lab's namespaces, state directory and cgroup2 mount have fixed
// names, and the lab's real node mounts the machine's cgroup hierarchies
// again inside itself, as it finds them when it comes up.
const LabLock = "/run/lock/svclab-test.lock"

// Cgroup2 is a cgroup2 mount for a test's cgroups (make them with
// MakeCgroup, named for the test): the machine's own mount of the v2
// hierarchy (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside cgroup v1)
// when there is one, so the test adds no mount of its own. Only on a
// machine that mounts no cgroup2 does it mount one on a directory of the
// test's, removed at cleanup, and it holds LabLock meanwhile: a second
// mount of the hierarchy, seen by a lab coming up beside the test, made the
// lab's real node mount cgroup2 twice, which the kernel refuses ("cgroup2
// already mounted"). It skips the test when the mount is refused.
func Cgroup2(tb testing.TB) string {
	tb.Helper()
	if dir := machineCgroup2(); dir != "" {
		return dir
	}
	unlock := lockLab(tb)
	tb.Cleanup(unlock)
	dir := tb.TempDir()
	if err := unix.Mount("none", dir, "cgroup2", 0, ""); err != nil {
		tb.Skipf("no cgroup2 mounted, and mount -t cgroup2 refused: %v", err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			tb.Errorf("unmount cgroup2 at %s: %v", dir, err)
		}
	})
	return dir
}

// machineCgroup2 is where the machine mounts the root of the cgroup2
// hierarchy under /sys/fs/cgroup, or "".
func machineCgroup2() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	return cgroup2In(b)
}

// cgroup2In is the first mount point of the whole cgroup2 hierarchy under
// /sys/fs/cgroup in mountinfo text, or "".
func cgroup2In(mountinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 || g[0] != "cgroup2" || f[3] != "/" {
			continue
		}
		if f[4] == "/sys/fs/cgroup" || strings.HasPrefix(f[4], "/sys/fs/cgroup/") {
			return f[4]
		}
	}
	return ""
}

// lockLab waits for LabLock and returns its release; without the lock
// file (not root), or under a lab test that holds it (SVCLAB_LOCK_HELD=1),
// it locks nothing.
func lockLab(tb testing.TB) (unlock func()) {
	if os.Getenv("SVCLAB_LOCK_HELD") == "1" {
		return func() {}
	}
	f, err := os.OpenFile(LabLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return func() {}
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		tb.Logf("waiting for %s (a lab is up or a lab test runs)", LabLock)
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			tb.Logf("lock %s: %v; going on without it", LabLock, err)
		}
	}
	return func() { f.Close() }
}

// HostPath is path (a directory of this process's, as Cgroup2 returns) as a
// process started in a namespace (Command, Start: `ip netns exec`) reaches
// it. ip netns exec mounts a sysfs of its own on /sys, which hides the
// machine's cgroup mounts below it; /proc/PID/root/PATH resolves PATH in
// this process's mount namespace instead (proc(5)). Paths outside /sys are
// returned as they are.
func HostPath(path string) string {
	if path != "/sys" && !strings.HasPrefix(path, "/sys/") {
		return path
	}
	return fmt.Sprintf("/proc/%d/root%s", os.Getpid(), path)
}
