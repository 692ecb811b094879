package cluster

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// PodBridge is the pods' link in a real node's namespace.
const PodBridge = "cni0"

// nodeFiles are the paths of the real node's files, all under the state
// directory: what runs in the node's mount namespace sees /run, /var/lib and
// /var/log as the lab's directories run, varlib and varlog, and the state
// directory where it is on the machine.
type nodeFiles struct {
	dir                    string // Node.Dir
	pin                    string // the bind mount that keeps the mount namespace
	run, varlib, varlog    string
	containerd, kubelet    string // configuration files
	kubeconfig, resolvConf string
	cniDir                 string // containerd's conf_dir
	sysctls                string // files bound over /proc/sys entries
	// usrLib holds the upper and work directories of the overlay on /usr/lib
	// (mountCommands: /lib/modules).
	usrLib string
}

func (n *Node) files() nodeFiles {
	d := n.Dir
	return nodeFiles{
		dir:        d,
		pin:        filepath.Join(d, "ns", "mnt"),
		run:        filepath.Join(d, "run"),
		varlib:     filepath.Join(d, "var-lib"),
		varlog:     filepath.Join(d, "var-log"),
		containerd: filepath.Join(d, "containerd.toml"),
		kubelet:    filepath.Join(d, "kubelet.yaml"),
		kubeconfig: filepath.Join(d, "kubelet.kubeconfig"),
		resolvConf: filepath.Join(d, "resolv.conf"),
		cniDir:     filepath.Join(d, "cni"),
		sysctls:    filepath.Join(d, "sysctl"),
		usrLib:     filepath.Join(d, "usr-lib"),
	}
}

// containerdSocket is containerd's socket inside the node's mount namespace.
const containerdSocket = "/run/containerd/containerd.sock"

// kubeletSysctls are the machine-wide sysctls the kubelet checks at start
// and would rewrite (kubelet's setupKernelTunables, pkg/kubelet/cm/
// container_manager_linux.go at v1.37.2), with the values it wants. None
// of them is per network namespace: in the node's mount namespace a file of
// the lab holding that value is bound over each /proc/sys entry, so the
// kubelet finds what it wants, and protectKernelDefaults makes it fail
// rather than write should it ever not.
var kubeletSysctls = []struct{ name, value string }{
	{"vm/overcommit_memory", "1"},
	{"vm/panic_on_oom", "0"},
	{"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"},
	{"kernel/keys/root_maxkeys", "1000000"},
	{"kernel/keys/root_maxbytes", "25000000"},
}

// mountCommands render the node's mount namespace, each command to be run
// inside it (nsenter --mount=PIN --net=NODE): the node's own /sys (`ip
// netns exec` gives one; nsenter does not) with the machine's cgroup
// hierarchies mounted again in it and a bpffs of the node's own on
// /sys/fs/bpf (where a node's socket LB pins: each mount of bpffs is a
// filesystem of its own, so the pins are the node's, and they go with its
// mount namespace at svclab down), the sysctl files, the lab's /var/lib,
// /var/log and resolv.conf, and last the lab's /run, with the state
// directory bound back where it was when it lives in /run. On a machine
// without /lib/modules (noModules), /usr/lib gets an overlay of the lab's
// with an empty modules directory in it: kube-proxy's DaemonSet, as
// kubeadm writes it, mounts the host's /lib/modules, and containerd would
// otherwise make that directory on the machine's own disk.
func (f nodeFiles) mountCommands(cgroups []topology.CgroupMount, stateDir string, noModules bool) [][]string {
	cmds := [][]string{
		{"mount", "-t", "sysfs", "sysfs", "/sys"},
		{"mount", "-t", "bpf", "-o", "mode=0700", "bpf", "/sys/fs/bpf"},
		{"mount", "-t", "tmpfs", "-o", "mode=755", "cgroup", "/sys/fs/cgroup"},
	}
	for _, c := range cgroups {
		cmds = append(cmds,
			[]string{"mkdir", "-p", c.Point},
			[]string{"mount", "-t", c.Fstype, "-o", c.Options, c.Fstype, c.Point})
	}
	for _, s := range kubeletSysctls {
		cmds = append(cmds, []string{"mount", "--bind", filepath.Join(f.sysctls, strings.ReplaceAll(s.name, "/", ".")), "/proc/sys/" + s.name})
	}
	if noModules {
		upper, work := filepath.Join(f.usrLib, "upper"), filepath.Join(f.usrLib, "work")
		cmds = append(cmds,
			[]string{"mount", "-t", "overlay", "overlay", "-o", "lowerdir=/usr/lib,upperdir=" + upper + ",workdir=" + work, "/usr/lib"},
			[]string{"mkdir", "-p", "/usr/lib/modules"})
	}
	cmds = append(cmds,
		[]string{"mount", "--bind", f.varlib, "/var/lib"},
		[]string{"mount", "--bind", f.varlog, "/var/log"},
		[]string{"mount", "--bind", f.resolvConf, "/etc/resolv.conf"})
	if rel, ok := underRun(stateDir); ok {
		cmds = append(cmds, []string{"mount", "--bind", stateDir, filepath.Join(f.run, rel)})
	}
	return append(cmds, []string{"mount", "--rbind", f.run, "/run"})
}

// underRun says whether dir is in /run, and where.
func underRun(dir string) (string, bool) {
	rel, err := filepath.Rel("/run", dir)
	return rel, err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}

// containerdConfig is containerd's configuration: every path in the
// node's mount namespace, the CRI plugin on overlayfs with runc and the
// cgroupfs driver, and what this machine needs (see docs/kind.md).
// runc is the runc containerd runs, "" for its own (the first on PATH).
func (f nodeFiles) containerdConfig(runc string) string {
	binary := ""
	if runc != "" {
		// runc-capbound: a privileged container (kube-proxy's DaemonSet)
		// gets the capabilities this machine can give (docs/kind.md).
		binary = fmt.Sprintf("\n        BinaryName = %q", runc)
	}
	return fmt.Sprintf(`# written by svclab: containerd of the lab's real node
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
# The opt plugin would make /opt/containerd on the machine; the others are
# snapshotters this node does not use.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[1]q

[plugins."io.containerd.grpc.v1.cri"]
  # Imported from bin/e2e-images/pause.tar: nothing is pulled.
  sandbox_image = %[2]q
  # The machine withholds CAP_SYS_RESOURCE: a container may not get a lower
  # oom_score_adj than containerd's own, or runc fails to start it.
  restrict_oom_score_adj = true
  # Pods' network namespaces are pinned under /run/containerd, the lab's.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # The kubelet's cgroupDriver is cgroupfs: the machine has no systemd.
        SystemdCgroup = false%[5]s
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[3]q
    conf_dir = %[4]q
`, containerdSocket, images.PauseRef, cniBinDir, f.cniDir, binary)
}

// cniConfig is the pods' network: a bridge in the node's namespace holding
// the first address of the pod range, host-local handing out the rest, and
// portmap for hostPorts. No masquerade: svcproxy's rules do what a cluster
// needs, and nothing leaves the lab.
func cniConfig(podCIDR netip.Prefix) string {
	gw := podCIDR.Addr().Next()
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "svclab",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, PodBridge, podCIDR.String(), gw.String())
}

// kubeletConfig is the kubelet's KubeletConfiguration; each setting that is
// not a default of kubeadm's says why it is there.
func (n *Node) kubeletConfig() string {
	f := n.files()
	return fmt.Sprintf(`# written by svclab: the kubelet of the lab's real node
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%[1]s
# The machine mounts cgroup v1, which kubelet 1.35+ refuses unless told.
failCgroupV1: false
# No systemd on the machine; containerd's runc says SystemdCgroup = false.
cgroupDriver: cgroupfs
# Pods' cgroups under a root of the lab's in every hierarchy: svclab down
# finds their processes there and removes the directories.
cgroupRoot: /%[2]s
# The sysctls the kubelet checks are the lab's files (lab/cluster/nodefiles.go):
# fail rather than write one.
protectKernelDefaults: true
clusterDNS: [%[3]q]
clusterDomain: cluster.local
# The node's resolv.conf, the lab's (dnsPolicy: Default pods get it).
resolvConf: %[4]q
# Port 10250 is reachable only inside the lab's namespaces; the API server
# proxies kubectl exec and logs there without a client certificate.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
failSwapOn: false
# The machine's disk is shared: evict on its last percent only.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
`, containerdSocket, n.CgroupRoot, n.DNS, f.resolvConf)
}

// resolvConf is the node's resolv.conf: its own address, where nothing
// answers DNS, so a lookup of a name beyond the lab (an image's registry,
// clusterdns's upstream) fails at once instead of waiting for a server that
// cannot be reached.
func (n *Node) resolvConf() string {
	return fmt.Sprintf("# written by svclab: the lab's node has no resolver, and no way out\nnameserver %s\n", n.Addr)
}
