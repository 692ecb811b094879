package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The lab's cgroup root is one directory, CgroupRoot ("svclab"), in every
// cgroup hierarchy the machine mounts. The real node's kubelet puts its pods
// there (its cgroupRoot setting, KubeletConfiguration's); in the cgroup2 hierarchy it is also the
// lab's subtree, where svcproxy --mode socklb attaches its socket hook: every
// process svclab starts in a pod, or in the client, is born in a child of it,
// <cgroup2>/svclab/pods/<host>. Down kills whatever runs under the root in
// every hierarchy and removes the directories, deepest first, so it also
// cleans what a crashed `svclab up` left. The kubeadm cluster's nodes each
// have a root of their own below it, svclab/<node> (their kubelets'
// cgroupRoot), and runc puts each container there in the cgroup2 hierarchy
// too (0::/svclab/<node>/kubepods/...): that directory holds the node's
// pods and no other node's, where the node's svcproxy attaches in socklb
// mode (lab/cluster/kubeadmsocklb.go).
//
// These machines mount cgroup v1, with an empty cgroup2 hierarchy at
// /sys/fs/cgroup/unified whose root holds most of the machine's processes.
// The lab mounts cgroup2 again on a directory of its own, privateCgroup2
// (/run/svclab-cgroup2), and works there only: the path does not depend on
// how the machine mounts its cgroups, and a learner sees at once which
// directories are the lab's. There is one cgroup2 hierarchy per machine (per
// cgroup namespace), so the lab's mount shows the same tree as the machine's:
// the lab only makes directories below it and never moves a process that is
// not its own.

// PodCgroups is the directory of the subtree that holds one cgroup per host
// whose processes count as pods of the node.
const PodCgroups = "pods"

// InSubtree says whether the processes of host h run in the lab's cgroup2
// subtree, where a socket hook sees their connect() and sendmsg(). The pods
// do, and so does the client: it stands for a pod of this node without a
// server (its address is in the cluster range, the node routes it as it
// routes pods, svcproxy does not masquerade it), and on a real node a pod's
// processes are below the cgroup2 root that Cilium's socket LB attaches to.
// The node's own processes (svcproxy, clusterdns: host-network daemons) and
// the outside host's stay out. The outside host stands for another machine,
// whose packets reach the node only as forwarded packets, which no socket
// hook on the node can see: in the lab every host shares one kernel, and a
// cgroup hook follows a process, not its network namespace, so only the
// cgroup keeps its traffic from meeting the hook.
func InSubtree(h Host) bool { return h.Role == RolePod || h.Role == RoleClient }

// CgroupRoot is the name of the lab's cgroup root.
const CgroupRoot = "svclab"

// Cgroups is the lab's cgroup root in every hierarchy, and its cgroup2
// subtree: made by `svclab up`, emptied and removed by `svclab down`.
type Cgroups struct {
	stateDir string
	name     string
}

// NewCgroups returns the cgroups of the lab whose state directory is
// stateDir, under the root name (CgroupRoot; another name only in tests
// that must not meet a running lab's).
func NewCgroups(stateDir, name string) *Cgroups {
	return &Cgroups{stateDir: stateDir, name: name}
}

// Name is the root's name, the same in every hierarchy: "svclab".
func (c *Cgroups) Name() string { return c.name }

// privateCgroup2 is where the lab mounts the cgroup2 hierarchy: beside the
// state directory, never in it, so that removing the state directory can
// never walk into a cgroup hierarchy.
func (c *Cgroups) privateCgroup2() string { return filepath.Clean(c.stateDir) + "-cgroup2" }

// privateCgroup2Mounted says whether the lab's cgroup2 mount is in place.
func (c *Cgroups) privateCgroup2Mounted() bool {
	for _, m := range c.mounts() {
		if m.Point == c.privateCgroup2() && m.Fstype == "cgroup2" {
			return true
		}
	}
	return false
}

// mountPrivateCgroup2 mounts the cgroup2 hierarchy on privateCgroup2, unless
// it is there already.
func (c *Cgroups) mountPrivateCgroup2() error {
	if c.privateCgroup2Mounted() {
		return nil
	}
	dir := c.privateCgroup2()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("cgroup2", dir, "cgroup2", 0, ""); err != nil {
		return fmt.Errorf("mount cgroup2 on %s: %w", dir, err)
	}
	return nil
}

// Subtree is the root of the lab's cgroup2 subtree, <cgroup2>/svclab:
// what svcproxy --mode socklb attaches its programs to.
func (c *Cgroups) Subtree() (string, error) {
	if !c.privateCgroup2Mounted() {
		return "", fmt.Errorf("no cgroup2 mounted on %s: the lab is not up (svclab up mounts it)", c.privateCgroup2())
	}
	return filepath.Join(c.privateCgroup2(), c.name), nil
}

// MakeSubtree mounts cgroup2 on privateCgroup2 and makes the subtree
// and its pods directory (`svclab up`).
func (c *Cgroups) MakeSubtree() error {
	if err := c.mountPrivateCgroup2(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(c.privateCgroup2(), c.name, PodCgroups), 0o755); err != nil {
		return fmt.Errorf("the lab's cgroup2 subtree: %w", err)
	}
	return nil
}

// hostCgroup is the cgroup of host name in the subtree.
func (c *Cgroups) hostCgroup(name string) (string, error) {
	root, err := c.Subtree()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, PodCgroups, name), nil
}

// Place makes cmd start in h's cgroup when h is in the subtree (a
// host outside it is left alone): the child is born there, by clone3's
// CLONE_INTO_CGROUP (Go's SysProcAttr.UseCgroupFD), so it never runs a
// moment outside, as it would if its pid were written to cgroup.procs once
// started. release closes the cgroup's directory once cmd has started.
func (c *Cgroups) Place(cmd *exec.Cmd, h Host) (release func(), err error) {
	if !InSubtree(h) {
		return func() {}, nil
	}
	dir, err := c.hostCgroup(h.Name)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", h.Name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("host %s: cgroup: %w", h.Name, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("host %s: cgroup: %w", h.Name, err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(f.Fd())
	return func() { f.Close() }, nil
}

// RemoveHost kills what still runs in host name's cgroup (a command
// of `svclab exec`, say) and removes it: the control-plane lab's kubelet
// deleting a pod, once its server has stopped. None is no error.
func (c *Cgroups) RemoveHost(name string) error {
	dir, err := c.hostCgroup(name)
	if err != nil {
		return nil // the subtree is not mounted: nothing was made
	}
	killAll(func() []int { return TreePids(dir) })
	return rmdirRetry(dir)
}

// killAll kills every process pids lists, and those a dying one forks
// meanwhile: the processes of a cgroup directory and below it, say.
func killAll(pids func() []int) {
	for range 10 {
		ps := pids()
		if len(ps) == 0 {
			return
		}
		for _, pid := range ps {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range ps {
			WaitExit(pid, 5*time.Second)
		}
	}
}

// Dirs lists the directories of the lab's cgroup root in every
// hierarchy, deepest first.
func (c *Cgroups) Dirs() []string {
	var dirs []string
	for _, h := range c.hierarchies() {
		root := filepath.Join(h.Point, c.name)
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

// pids lists the processes in the lab's cgroups.
func (c *Cgroups) pids() []int { return dirsPids(c.Dirs()) }

// Remove kills every process in the lab's cgroups, and those a dying
// one forks meanwhile, then removes the directories deepest first (a cgroup
// directory goes only once empty of processes and of children), and last
// the private cgroup2 mount, if the lab made one.
func (c *Cgroups) Remove() error {
	killAll(c.pids)
	var errs []error
	for _, d := range c.Dirs() {
		if err := rmdirRetry(d); err != nil {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", d, err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, c.unmountPrivateCgroup2())
	}
	return errors.Join(errs...)
}

// unmountPrivateCgroup2 unmounts and removes privateCgroup2 when mounted.
func (c *Cgroups) unmountPrivateCgroup2() error {
	dir := c.privateCgroup2()
	if c.privateCgroup2Mounted() {
		if err := unix.Unmount(dir, 0); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Leftovers lists the lab's cgroup directories and their processes,
// for Leftovers.
func (c *Cgroups) Leftovers() []string {
	var out []string
	for _, d := range c.Dirs() {
		out = append(out, "cgroup "+d)
	}
	for _, pid := range c.pids() {
		out = append(out, fmt.Sprintf("process %d: in the cgroup root /%s", pid, c.name))
	}
	if c.privateCgroup2Mounted() {
		out = append(out, "mount cgroup2 on "+c.privateCgroup2())
	} else if _, err := os.Stat(c.privateCgroup2()); err == nil {
		out = append(out, "file "+c.privateCgroup2())
	}
	return out
}

// TreePids lists the processes in cgroup directory dir and below it.
func TreePids(dir string) []int {
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

// rmdirRetry removes an empty cgroup directory; the kernel refuses (EBUSY)
// for a moment after its last process exits, until the exit is complete.
// A directory already gone is no error.
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
