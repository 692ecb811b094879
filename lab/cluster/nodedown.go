package cluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// Down stops what the cluster runs beyond the lab's network namespaces: the
// kubelets first (the control-plane lab's would make pods' namespaces while
// the others are removed), then each real node's containerd, every process
// of its pods (each in a cgroup under the lab's cgroup root, whichever
// namespace it is in: Cgroups.Remove kills them and removes the
// directories), and its mount namespace. The namespaces themselves, with
// the shims in the node's, are topology.Net.Down's.
func (c *Cluster) Down() error {
	kubelets := []string{"kubelet"}
	for _, n := range c.everyNode() {
		if !slices.Contains(kubelets, n.Kubelet) {
			kubelets = append(kubelets, n.Kubelet)
		}
	}
	for _, name := range kubelets {
		if pid, ok := c.net.ReadPid(name, ""); ok {
			if err := topology.StopPids([]int{pid}, 5*time.Second); err != nil {
				return err
			}
		}
	}
	var errs []error
	for _, n := range c.everyNode() {
		if pid, ok := c.net.ReadPid(n.Containerd, ""); ok {
			errs = append(errs, topology.StopPids([]int{pid}, 5*time.Second))
		}
	}
	errs = append(errs, c.net.Cgroups().Remove())
	for _, n := range c.everyNode() {
		errs = append(errs, n.unpin())
	}
	return errors.Join(errs...)
}

// unpin unmounts the pin of n's mount namespace and the private mount that
// holds it. The namespace, and every mount the pods made in it, goes with
// its last process.
func (n *Node) unpin() error {
	pin := n.files().pin
	var errs []error
	for _, p := range []string{pin, filepath.Dir(pin)} {
		if err := unix.Unmount(p, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
