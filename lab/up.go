package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// errRealNodeSocketLB refuses --mode socklb on the real node, whose pods are
// started by containerd, not born in the lab's subtree.
var errRealNodeSocketLB = errors.New("mode socklb: not on the real node: its pods' processes are in the kubelet's cgroups, not in the lab's cgroup2 subtree, and svcproxy's DaemonSet mounts no cgroup2 to attach to")

// UpOptions say what `svclab up` builds.
type UpOptions struct {
	// Mode is svcproxy's --mode.
	Mode string
	// ControlPlane, when not nil, runs etcd, kube-apiserver and
	// kube-controller-manager in the node, and svcproxy and clusterdns watch
	// that API server; nil is the file-fed lab, where they read the manifests
	// file.
	ControlPlane *ControlPlane
	// RealNode, with ControlPlane, runs a real node beside it: containerd,
	// the kubelet and kube-scheduler, with svcproxy and clusterdns as pods
	// of deploy/realnode (their image's), instead of svclab's processes.
	RealNode *RealNode
}

// Up builds the file-fed lab with svcproxy in mode; see UpWith.
func (l *Lab) Up(ctx context.Context, mode string) error {
	return l.UpWith(ctx, UpOptions{Mode: mode})
}

// UpWith builds the lab: it removes what a crashed run left behind, makes
// the lab's cgroup2 subtree (topology/cgroup.go), creates the namespaces and links of
// the Plan, writes the pods' resolv.conf, starts a Pod server in each pod (in
// the pod's cgroup), then clusterdns and svcproxy in the node, and returns
// once each answers. With a control plane, the pods are the
// StatefulSets' of cluster.yaml, which the lab's kubelet starts (see
// upControlPlane).
func (l *Lab) UpWith(ctx context.Context, opts UpOptions) error {
	mode := opts.Mode
	if err := checkMode(mode); err != nil {
		return err
	}
	if s, err := l.net.ReadState(); err == nil && s.Demo != 0 && s.Demo != os.Getpid() && topology.Alive(s.Demo) {
		return fmt.Errorf("svclab demo (pid %d) is using the lab; wait for it to end", s.Demo)
	}
	if opts.RealNode != nil {
		return l.upWithRealNode(ctx, opts)
	}
	proxy, err := l.net.Binary("svcproxy")
	if err != nil {
		return err
	}
	dns, err := l.net.Binary("clusterdns")
	if err != nil {
		return err
	}
	if err := l.Down(ctx); err != nil {
		return fmt.Errorf("remove the leftovers of an earlier lab: %w", err)
	}
	if err := os.MkdirAll(l.cfg.StateDir, 0o755); err != nil {
		return err
	}
	if err := l.net.Cgroups().MakeSubtree(); err != nil {
		return err
	}
	if err := l.net.BPFFS().Mount(); err != nil {
		return err
	}
	st := topology.State{Mode: mode}
	if l.inDemo {
		st.Demo = os.Getpid()
	}
	if opts.ControlPlane != nil {
		st.Kubectl = opts.ControlPlane.Kubectl
		if err := l.net.WriteState(st); err != nil {
			return err
		}
		return l.upControlPlane(ctx, *opts.ControlPlane, dns, proxy, mode)
	}
	if err := os.WriteFile(l.ManifestsPath(), l.cfg.Manifests, 0o644); err != nil {
		return err
	}
	if err := l.net.WriteState(st); err != nil {
		return err
	}
	p := l.cfg.Plan
	if err := l.net.Build(ctx, func(topology.Host) bool { return true }); err != nil {
		return err
	}
	for _, h := range p.Pods() {
		if err := l.startPod(ctx, h); err != nil {
			return err
		}
	}
	if err := l.startDNS(ctx, dns); err != nil {
		return err
	}
	return l.startProxy(ctx, proxy, mode)
}

// upWithRealNode is UpWith for the real-node lab: svcproxy runs as the
// DaemonSet's pod, in the mode of deploy/realnode's ConfigMap.
func (l *Lab) upWithRealNode(ctx context.Context, opts UpOptions) error {
	if opts.Mode == "socklb" {
		return errRealNodeSocketLB
	}
	if opts.ControlPlane == nil {
		return errors.New("a real node needs the control plane (its programs: make kapi)")
	}
	if err := l.Down(ctx); err != nil {
		return fmt.Errorf("remove the leftovers of an earlier lab: %w", err)
	}
	if err := os.MkdirAll(l.cfg.StateDir, 0o755); err != nil {
		return err
	}
	if err := l.net.Cgroups().MakeSubtree(); err != nil {
		return err
	}
	st := topology.State{Mode: opts.Mode, Kubectl: opts.ControlPlane.Kubectl, RealNode: true}
	if err := l.net.WriteState(st); err != nil {
		return err
	}
	return l.upRealNode(ctx, *opts.ControlPlane, *opts.RealNode, opts.Mode)
}

func validMode(m string) bool {
	for _, v := range Modes {
		if m == v {
			return true
		}
	}
	return false
}

// Down removes everything the lab made: the processes in its namespaces and
// in its cgroups (the pods' cgroup2 subtree; the real node's containerd, its
// pods and its mount namespace), the cgroup directories, the namespaces (and
// with them their links, routes and rules), their /etc/netns files and the
// state directory. It is safe to run when nothing is up, and it finds what a
// crashed `svclab up` left: everything has a fixed name.
func (l *Lab) Down(ctx context.Context) error {
	// The control-plane lab's kubelet first: it would make pods' namespaces
	// while the others are removed.
	if pid, ok := l.net.ReadPid("kubelet", ""); ok {
		if err := topology.StopPids([]int{pid}, 5*time.Second); err != nil {
			return err
		}
	}
	// The real node's containerd and pods, which are not all in the lab's
	// network namespaces; then its mount namespace.
	if err := l.downRealNode(); err != nil {
		return err
	}
	// Then the namespaces and what runs there, the mounts and the files.
	return l.net.Down(ctx)
}
