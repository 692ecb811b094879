package lab

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// downRealNode removes what the real node has beyond the lab's network
// namespaces, once the kubelet is stopped: containerd, every process of its
// pods (each is in a cgroup under the lab's cgroup root, whichever namespace
// it is in; removeCgroups kills them and removes the directories), and the
// mount namespace's pin. The shims live in the node's network namespace,
// which Down empties next. It does nothing when no real node ran.
func (l *Lab) downRealNode() error {
	var errs []error
	if pid, ok := l.net.ReadPid("containerd", ""); ok {
		errs = append(errs, topology.StopPids([]int{pid}, 5*time.Second))
	}
	errs = append(errs, l.net.Cgroups().Remove())
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
