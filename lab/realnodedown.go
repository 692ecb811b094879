package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// downRealNode removes what the real node has beyond the lab's network
// namespaces, once the kubelet is stopped: containerd, every process of its
// pods (each is in a cgroup under cgroupRoot, whichever namespace it is in),
// the mount namespace's pin, and the cgroup directories, deepest first. The
// shims live in the node's network namespace, which Down empties next. It
// does nothing when no real node ran.
func (l *Lab) downRealNode() error {
	var errs []error
	if pid, ok := l.readPid("containerd", ""); ok {
		errs = append(errs, stopPids([]int{pid}, 5*time.Second))
	}
	errs = append(errs, killCgroupProcs(l.cgroups()))
	errs = append(errs, l.unpinNodeMountNS())
	return errors.Join(errs...)
}

// unpinNodeMountNS unmounts the pin and the private mount that holds it.
// The namespace, and every mount the pods made in it, goes with its last
// process.
func (l *Lab) unpinNodeMountNS() error {
	pin := l.nodeFiles().pin
	var errs []error
	for _, p := range []string{pin, filepath.Dir(pin)} {
		if err := unix.Unmount(p, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// cgroupDirs lists the directories of the real node's cgroup root in every
// hierarchy, deepest first.
func cgroupDirs(hs []cgroupMount) []string {
	var dirs []string
	for _, h := range hs {
		root := filepath.Join(h.point, cgroupRoot)
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.SliceStable(dirs, func(i, j int) bool {
		return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/")
	})
	return dirs
}

// cgroupPids lists the processes in the real node's cgroups.
func cgroupPids(hs []cgroupMount) []int {
	return dirsPids(cgroupDirs(hs))
}

// treePids lists the processes in cgroup directory dir and below it.
func treePids(dir string) []int {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	return dirsPids(dirs)
}

// dirsPids lists the processes of cgroup directories, each once.
func dirsPids(dirs []string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// killCgroupProcs kills every process in the real node's cgroups, and
// those a dying one forks meanwhile, then removes the directories deepest
// first: a cgroup directory goes only once empty of processes and of
// children.
func killCgroupProcs(hs []cgroupMount) error {
	for range 10 {
		pids := cgroupPids(hs)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range pids {
			waitExit(pid, 5*time.Second)
		}
	}
	var errs []error
	for _, d := range cgroupDirs(hs) {
		if err := rmdirRetry(d); err != nil {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes an empty cgroup directory; the kernel refuses (EBUSY)
// for a moment after its last process exits, until the exit is complete.
func rmdirRetry(d string) error {
	var err error
	for range 50 {
		err = unix.Rmdir(d)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// realNodeLeftovers lists the cgroup directories and processes of the real
// node, for Leftovers.
func realNodeLeftovers(hs []cgroupMount) []string {
	var out []string
	for _, d := range cgroupDirs(hs) {
		out = append(out, "cgroup "+d)
	}
	for _, pid := range cgroupPids(hs) {
		out = append(out, fmt.Sprintf("process %d: in the cgroup root /%s", pid, cgroupRoot))
	}
	return out
}
