package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// svcproxy's socket LB (mode socklb) served from kubeadm's kube-proxy
// DaemonSet, as an operator would run it: the pod needs the node's cgroup2
// hierarchy, to attach its connect() hooks to the directory that holds the
// node's pods, and the node's bpffs, to pin them so that a restart keeps
// them. kubeadm's DaemonSet has neither, so `svclab mode socklb` adds them
// through the API server (two hostPath volumes and two flags beside
// --config) and switching to another mode takes them away again, leaving
// the DaemonSet as kubeadm made it.
//
// Cilium does the same for its socket LB: its agent's DaemonSet mounts the
// host's cgroup2 hierarchy (a hostPath of /run/cilium/cgroupv2, which its
// init container mounts on the host) and its bpffs (/sys/fs/bpf), and
// attaches at the hierarchy's root (--cgroup-root). Cilium runs once per
// node and every pod of the node is below that root. In the lab, three
// nodes share one kernel, so one cgroup2 hierarchy: a node's svcproxy
// attached at the root would rewrite the connect() of every node's pods
// from its own maps (and its traffic policy Local endpoints). Each kubelet
// has a cgroup root of its own, svclab/<node> (kubeletPatch), in every
// hierarchy: runc puts each of the node's containers in it, the cgroup2
// hierarchy included, so that directory holds the node's pods and no
// other node's. svcproxy attaches there.

const (
	// socketLBCgroupVolume is the volume of the node's cgroup2 hierarchy,
	// mounted at socketLBCgroupMount in the container, as Cilium mounts it
	// at /run/cilium/cgroupv2: beside the container's own /sys/fs/cgroup.
	socketLBCgroupVolume = "svcproxy-cgroup2"
	socketLBCgroupMount  = "/run/svcproxy/cgroupv2"
	// socketLBBPFVolume is the node's bpffs, at the same path in the
	// container, where svcproxy pins by default (/sys/fs/bpf/svcproxy).
	socketLBBPFVolume = "svcproxy-bpffs"
	socketLBBPFMount  = "/sys/fs/bpf"
	// socketLBPinPath is svcproxy's --socklb-pin-path in the pod (and in
	// the node, where the volume comes from): given, so that a node
	// without a bpffs is an error, not a log line.
	socketLBPinPath = socketLBBPFMount + "/svcproxy"
)

// socketLBFlags are the flags the socket LB adds to the container's
// command; withoutSocketLB removes every flag of these names.
var socketLBFlags = []string{"--socklb-cgroup", "--socklb-pin-path"}

// socketLBPod says where a node's svcproxy finds its cgroup2 directory:
// the node's cgroup2 mount point (the machine's, which each node mounts
// again at the same path: nodefiles.go mountCommands) and the directory of
// the nodes' cgroup roots in it, "svclab", each node's being
// svclab/<node name>.
type socketLBPod struct {
	Cgroup2 string // /sys/fs/cgroup/unified on these machines
	Root    string // svclab
}

// cgroupFlag is --socklb-cgroup: the node's own directory, named by the
// node's name that kubeadm's DaemonSet puts in $(NODE_NAME) (the downward
// API's spec.nodeName; the kubelet expands $(VAR) in a command).
func (s socketLBPod) cgroupFlag() string {
	return "--socklb-cgroup=" + filepath.Join(socketLBCgroupMount, s.Root) + "/$(NODE_NAME)"
}

// withSocketLB adds to spec, kube-proxy's pod template, what the socket LB
// needs: the two hostPath volumes, their mounts in the first container
// (kube-proxy's), and the flags at the end of its command. Whatever an
// earlier withSocketLB added is replaced, so it can be applied again.
func withSocketLB(spec *corev1.PodSpec, s socketLBPod) {
	withoutSocketLB(spec)
	dir := corev1.HostPathDirectory
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: socketLBCgroupVolume, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: s.Cgroup2, Type: &dir}}},
		corev1.Volume{Name: socketLBBPFVolume, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: socketLBBPFMount, Type: &dir}}},
	)
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: socketLBCgroupVolume, MountPath: socketLBCgroupMount},
		corev1.VolumeMount{Name: socketLBBPFVolume, MountPath: socketLBBPFMount},
	)
	c.Command = append(c.Command, s.cgroupFlag(), "--socklb-pin-path="+socketLBPinPath)
}

// withoutSocketLB removes from spec what withSocketLB adds.
func withoutSocketLB(spec *corev1.PodSpec) {
	ours := func(name string) bool { return name == socketLBCgroupVolume || name == socketLBBPFVolume }
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return ours(v.Name) })
	c := &spec.Containers[0]
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return ours(m.Name) })
	c.Command = slices.DeleteFunc(c.Command, func(arg string) bool {
		name, _, _ := strings.Cut(arg, "=")
		return slices.Contains(socketLBFlags, name)
	})
}

// hasSocketLB says whether spec has what withSocketLB adds.
func hasSocketLB(spec *corev1.PodSpec) bool {
	return slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == socketLBCgroupVolume })
}

// socketLBPodOf is where the lab's nodes' svcproxy finds its cgroup2
// directory: the machine's cgroup2 mount, which every node mounts again
// at the same path.
func (c *Cluster) socketLBPodOf() (socketLBPod, error) {
	for _, m := range c.net.Cgroups().Machine() {
		if m.Fstype == "cgroup2" {
			return socketLBPod{Cgroup2: m.Point, Root: c.net.Cgroups().Name()}, nil
		}
	}
	return socketLBPod{}, errors.New("mode socklb on the kubeadm cluster: the machine mounts no cgroup2 hierarchy, where each node's pods would have a directory of their own (mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified)")
}

// setProxySocketLB gives kube-proxy's DaemonSet what the socket LB needs
// (on), or takes it away (!on), through the API server. It says whether the
// pod template changed: the DaemonSet then rolls its pods by itself.
func (c *Cluster) setProxySocketLB(ctx context.Context, on bool) (changed bool, err error) {
	var s socketLBPod
	if on {
		if s, err = c.socketLBPodOf(); err != nil {
			return false, err
		}
	}
	client, err := c.Client()
	if err != nil {
		return false, err
	}
	dss := client.AppsV1().DaemonSets("kube-system")
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := dss.Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil {
			return err
		}
		spec := ds.Spec.Template.Spec.DeepCopy()
		if len(spec.Containers) == 0 {
			return errors.New("daemonset kube-system/kube-proxy: no container")
		}
		if on {
			withSocketLB(spec, s)
		} else {
			withoutSocketLB(spec)
		}
		if changed = !equality.Semantic.DeepEqual(spec, &ds.Spec.Template.Spec); !changed {
			return nil
		}
		ds.Spec.Template.Spec = *spec
		_, err = dss.Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("daemonset kube-system/kube-proxy: %w", err)
	}
	return changed, nil
}

// proxyHasSocketLB says whether kube-proxy's DaemonSet has what the socket
// LB needs (setProxySocketLB).
func (c *Cluster) proxyHasSocketLB(ctx context.Context) (bool, error) {
	client, err := c.Client()
	if err != nil {
		return false, err
	}
	ds, err := client.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return hasSocketLB(&ds.Spec.Template.Spec), nil
}

// removeSocketLBEveryNode removes what socklb mode leaves in every node
// before the node's pod changes mode: `svcproxy --cleanup` with the pin
// path, in the node's mount namespace, where its bpffs is. Neither the
// next mode's svcproxy (without the volume, it cannot see the pins) nor
// anyone else would: the pinned programs would go on rewriting the node's
// pods' connect() from maps nobody updates. Run while the socklb pod still
// serves, it unpins, and the programs detach when that pod stops (its
// process holds them until then), so the node's pods see no gap. It drops
// socklb's nftables table too (--cleanup removes every mode's rules): the
// node's own processes, whose connect() the socket LB never sees, reach
// Services again once the next mode's pod has synced.
func (c *Cluster) removeSocketLBEveryNode(ctx context.Context) error {
	bin, err := c.net.Binary("svcproxy")
	if err != nil {
		return err
	}
	for _, n := range c.Nodes() {
		if err := topology.Run(ctx, n.inNode(bin, "--cleanup", "--socklb-pin-path", socketLBPinPath)...); err != nil {
			return fmt.Errorf("node %s: socklb mode's leftovers: %w", n.Name, err)
		}
	}
	return nil
}

// NodeSocketLB is where a node's svcproxy runs the socket LB in socklb
// mode, for `svclab rules` and `svclab trace --node`, which read its maps.
type NodeSocketLB struct {
	// Cgroup is the cgroup2 directory its programs are attached to, the
	// node's kubelet's cgroup root, in the lab's cgroup2 mount.
	Cgroup string
	// PinPath is where it pins its maps, as the node sees it: the node's
	// own bpffs, in its mount namespace.
	PinPath string
	// Reach is PinPath as a process of the machine reaches it (Node.Reach).
	Reach string
}

// SocketLBOf is where node name's svcproxy attaches and pins in socklb
// mode (withSocketLB's flags), once the node is up.
func (c *Cluster) SocketLBOf(name string) (NodeSocketLB, error) {
	nodes := c.Nodes()
	i := slices.IndexFunc(nodes, func(n *Node) bool { return n.Name == name })
	if i < 0 {
		return NodeSocketLB{}, fmt.Errorf("node %q: not a node of the cluster", name)
	}
	n := nodes[i]
	subtree, err := c.net.Cgroups().Subtree()
	if err != nil {
		return NodeSocketLB{}, err
	}
	reach, err := n.reach(c.net, socketLBPinPath)
	if err != nil {
		return NodeSocketLB{}, err
	}
	// The subtree is <mount>/svclab; the cgroup root, svclab/<node>, is a
	// path from the hierarchy's root.
	return NodeSocketLB{Cgroup: filepath.Join(filepath.Dir(subtree), n.CgroupRoot), PinPath: socketLBPinPath, Reach: reach}, nil
}
