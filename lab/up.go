package lab

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// UpOptions say what `svclab up` builds.
type UpOptions struct {
	// Mode is svcproxy's --mode.
	Mode string
	// ControlPlane, when not nil, runs etcd, kube-apiserver and
	// kube-controller-manager in the node, and svcproxy and clusterdns watch
	// that API server; nil is the file-fed lab, where they read the manifests
	// file.
	ControlPlane *cluster.ControlPlane
	// RealNode, with ControlPlane, runs a real node beside it: containerd,
	// the kubelet and kube-scheduler, with svcproxy and clusterdns as pods
	// of deploy/realnode (their image's), instead of svclab's processes.
	RealNode *cluster.NodePrograms
	// Kubeadm runs the cluster kubeadm makes instead (`svclab up --nodes
	// N`): Nodes nodes, kubeadm's control plane as static pods on the first,
	// kube-proxy in Mode (iptables, nftables or ipvs) and CoreDNS as its
	// pods.
	Kubeadm *cluster.KubeadmPrograms
	Nodes   int
	// Demo records this process as the lab's owner, so that a concurrent
	// `svclab up` does not pull the lab from under `svclab demo`.
	Demo bool
}

// Up builds the file-fed lab with svcproxy in mode; see UpWith.
func (l *Lab) Up(ctx context.Context, mode string) error {
	return l.UpWith(ctx, UpOptions{Mode: mode})
}

// UpWith builds the lab: it removes what a crashed run left behind, makes
// the lab's cgroup2 subtree and bpffs (package topology), records what runs
// in the state directory, then builds the lab of the source opts names
// (package cluster): the Plan's namespaces, a Pod server in each pod, then
// clusterdns and svcproxy in the node, each once it answers. With a control
// plane, the pods are the StatefulSets' of cluster.yaml, which the lab's
// kubelet starts (Cluster.UpSimulated); with a real node, svcproxy and
// clusterdns are its pods (Cluster.UpRealNode).
func (l *Lab) UpWith(ctx context.Context, opts UpOptions) error {
	mode := opts.Mode
	if err := cluster.CheckMode(mode); err != nil && opts.Kubeadm == nil {
		return err
	}
	if s, err := l.net.ReadState(); err == nil && s.Demo != 0 && s.Demo != os.Getpid() && topology.Alive(s.Demo) {
		return fmt.Errorf("svclab demo (pid %d) is using the lab; wait for it to end", s.Demo)
	}
	if opts.Kubeadm != nil {
		return l.upWithKubeadm(ctx, opts)
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
	if err := l.prepare(ctx); err != nil {
		return err
	}
	if err := l.net.BPFFS().Mount(); err != nil {
		return err
	}
	st := topology.State{Mode: mode}
	if opts.Demo {
		st.Demo = os.Getpid()
	}
	if opts.ControlPlane != nil {
		st.Kubectl = opts.ControlPlane.Kubectl
		if err := l.net.WriteState(st); err != nil {
			return err
		}
		return l.cluster.UpSimulated(ctx, *opts.ControlPlane, dns, proxy, mode)
	}
	if err := l.cluster.WriteManifests(); err != nil {
		return err
	}
	if err := l.net.WriteState(st); err != nil {
		return err
	}
	return l.cluster.UpFileFed(ctx, dns, proxy, mode)
}

// upWithRealNode is UpWith for the real-node lab: svcproxy runs as the
// DaemonSet's pod, in the mode of deploy/realnode's ConfigMap.
func (l *Lab) upWithRealNode(ctx context.Context, opts UpOptions) error {
	if opts.Mode == "socklb" {
		return cluster.ErrRealNodeSocketLB
	}
	if opts.ControlPlane == nil {
		return errors.New("a real node needs the control plane (its programs: make kapi)")
	}
	if err := l.prepare(ctx); err != nil {
		return err
	}
	st := topology.State{Mode: opts.Mode, Kubectl: opts.ControlPlane.Kubectl, RealNode: true}
	if err := l.net.WriteState(st); err != nil {
		return err
	}
	return l.cluster.UpRealNode(ctx, *opts.ControlPlane, *opts.RealNode, opts.Mode)
}

// upWithKubeadm is UpWith for the kubeadm cluster: the real kube-proxy
// and CoreDNS first, in the mode of kube-proxy's ConfigMap.
func (l *Lab) upWithKubeadm(ctx context.Context, opts UpOptions) error {
	if err := cluster.CheckKubeProxyMode(opts.Mode); err != nil {
		return err
	}
	if err := l.prepare(ctx); err != nil {
		return err
	}
	st := topology.State{Mode: opts.Mode, Kubectl: opts.Kubeadm.Kubectl, RealNode: true, Nodes: opts.Nodes}
	if err := l.net.WriteState(st); err != nil {
		return err
	}
	return l.cluster.UpKubeadm(ctx, *opts.Kubeadm, opts.Nodes, opts.Mode)
}

// prepare removes what a crashed run left behind, and makes the state
// directory and the lab's cgroup2 subtree.
func (l *Lab) prepare(ctx context.Context) error {
	if err := l.Down(ctx); err != nil {
		return fmt.Errorf("remove the leftovers of an earlier lab: %w", err)
	}
	if err := os.MkdirAll(l.cfg.StateDir, 0o755); err != nil {
		return err
	}
	return l.net.Cgroups().MakeSubtree()
}

// Down removes everything the lab made: what the cluster runs outside the
// lab's namespaces (the kubelets, the real nodes' containerd, their pods and
// mount namespaces, the lab's cgroups), then the processes in its
// namespaces, the namespaces (and with them their links, routes and rules),
// their /etc/netns files and the state directory. It is safe to run when
// nothing is up, and it finds what a crashed `svclab up` left: everything
// has a fixed name.
func (l *Lab) Down(ctx context.Context) error {
	if err := l.cluster.Down(); err != nil {
		return err
	}
	return l.net.Down(ctx)
}
