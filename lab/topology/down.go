package topology

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Down stops every process in the lab's namespaces, unmounts the bpffs,
// deletes the namespaces (and with them their links, routes and rules),
// their /etc/netns files and the state directory. It finds what a crashed
// `svclab up` left: everything has a fixed name. What runs outside the
// namespaces (a kubelet, containerd) must be stopped first.
func (n *Net) Down(ctx context.Context) error {
	nss, err := Namespaces(n.cfg.Plan.Prefix)
	if err != nil {
		return err
	}
	var pids []int
	for _, ns := range nss {
		ps, err := NSPids(ns)
		if err != nil {
			return err
		}
		pids = append(pids, ps...)
	}
	var errs []error
	if err := StopPids(pids, 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	n.Reap()
	// svcproxy is stopped: nothing adopts the socket LB's pins any more.
	if err := n.bpffs.Unmount(); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range nss {
		if err := Run(ctx, "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	etc, _ := filepath.Glob(filepath.Join(EtcNetnsDir, n.cfg.Plan.Prefix+"*"))
	for _, dir := range etc {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(n.cfg.StateDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Leftovers lists what the lab left on the machine: namespaces, their mounts
// (a private cgroup2 mount too), /etc/netns directories, the lab's cgroup
// directories (its cgroup2 subtree, the real node's) and their processes,
// the state directory, and processes whose command line names the state
// directory or the namespace prefix. Empty after Down.
func (n *Net) Leftovers() []string {
	var out []string
	prefix := n.cfg.Plan.Prefix
	nss, _ := Namespaces(prefix)
	for _, ns := range nss {
		out = append(out, "namespace "+ns)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "/"+prefix) || strings.Contains(line, n.cfg.StateDir) {
				out = append(out, "mount "+line)
			}
		}
	}
	etc, _ := filepath.Glob(filepath.Join(EtcNetnsDir, prefix+"*"))
	for _, f := range etc {
		out = append(out, "file "+f)
	}
	out = append(out, n.cgroups.Leftovers()...)
	out = append(out, n.bpffs.Leftovers()...)
	if _, err := os.Stat(n.cfg.StateDir); err == nil {
		out = append(out, "file "+n.cfg.StateDir)
	}
	des, _ := os.ReadDir("/proc")
	for _, de := range des {
		pid, err := strconv.Atoi(de.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", de.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		if strings.Contains(cmdline, n.cfg.StateDir) || strings.Contains(cmdline, " "+prefix) {
			out = append(out, fmt.Sprintf("process %d: %s", pid, cmdline))
		}
	}
	return out
}
