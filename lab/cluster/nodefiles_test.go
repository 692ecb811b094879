package cluster

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// TestMountCommands checks the node's mount namespace: the cgroup
// hierarchies mounted again, a bpffs of its own, every sysctl the kubelet
// checks bound, and the lab's /run last, with the state directory bound
// back into it only when it lives in /run.
func TestMountCommands(t *testing.T) {
	cgroups := []topology.CgroupMount{{Fstype: "cgroup", Options: "rw,cpu", Point: "/sys/fs/cgroup/cpu", Root: "/", Dev: "0:29"}}
	for _, tt := range []struct {
		stateDir string
		bindBack []string
	}{
		{"/run/svclab", []string{"mount", "--bind", "/run/svclab", "/run/svclab/node/run/svclab"}},
		{"/var/tmp/lab", nil},
	} {
		t.Run(tt.stateDir, func(t *testing.T) {
			n := planNode(topology.DefaultPlan(), tt.stateDir, topology.CgroupRoot)
			cmds := n.files().mountCommands(cgroups, tt.stateDir, true)
			var text []string
			for _, c := range cmds {
				text = append(text, strings.Join(c, " "))
			}
			all := strings.Join(text, "\n")
			require.Contains(t, all, "mount -t cgroup -o rw,cpu cgroup /sys/fs/cgroup/cpu")
			// The node's own bpffs, in its fresh /sys.
			require.Contains(t, all, "mount -t sysfs sysfs /sys\nmount -t bpf -o mode=0700 bpf /sys/fs/bpf\n")
			// No /lib/modules on the machine: the node's own, in an overlay.
			require.Contains(t, all, "mount -t overlay overlay -o lowerdir=/usr/lib,upperdir="+tt.stateDir+"/node/usr-lib/upper,workdir="+tt.stateDir+"/node/usr-lib/work /usr/lib\nmkdir -p /usr/lib/modules\n")
			for _, s := range kubeletSysctls {
				require.Contains(t, all, " /proc/sys/"+s.name+"\n", s.name)
			}
			require.Equal(t, []string{"mount", "--rbind", tt.stateDir + "/node/run", "/run"}, cmds[len(cmds)-1])
			if tt.bindBack != nil {
				require.Equal(t, tt.bindBack, cmds[len(cmds)-2])
			} else {
				require.NotContains(t, all, "mount --bind "+tt.stateDir+" ")
			}
		})
	}
}

// TestNodeConfigs checks the real node's configuration files parse, and
// hold what this machine needs (docs/kind.md).
func TestNodeConfigs(t *testing.T) {
	p := topology.DefaultPlan()
	n := planNode(p, "/run/svclab", topology.CgroupRoot)

	var kc map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(n.kubeletConfig()), &kc))
	require.Equal(t, "KubeletConfiguration", kc["kind"])
	require.Equal(t, false, kc["failCgroupV1"])
	require.Equal(t, "cgroupfs", kc["cgroupDriver"])
	require.Equal(t, "/svclab", kc["cgroupRoot"])
	require.Equal(t, true, kc["protectKernelDefaults"])
	require.Equal(t, []any{"198.18.0.10"}, kc["clusterDNS"])
	require.Equal(t, "/run/svclab/node/resolv.conf", kc["resolvConf"])

	var cni struct {
		Plugins []struct {
			Type string
			IPAM struct {
				Ranges [][]struct{ Subnet, Gateway string }
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(cniConfig(p.PodCIDR)), &cni))
	require.Equal(t, "bridge", cni.Plugins[0].Type)
	require.Equal(t, "198.19.64.0/24", cni.Plugins[0].IPAM.Ranges[0][0].Subnet)
	require.Equal(t, "198.19.64.1", cni.Plugins[0].IPAM.Ranges[0][0].Gateway)

	ctrd := n.files().containerdConfig("/opt/bin/runc-capbound")
	for _, want := range []string{
		`sandbox_image = "` + images.PauseRef + `"`,
		"restrict_oom_score_adj = true",
		"SystemdCgroup = false",
		`snapshotter = "overlayfs"`,
		`conf_dir = "/run/svclab/node/cni"`,
		`"io.containerd.internal.v1.opt"`,
		`BinaryName = "/opt/bin/runc-capbound"`,
	} {
		require.Contains(t, ctrd, want)
	}
	require.Equal(t, "# written by svclab: the lab's node has no resolver, and no way out\nnameserver 198.19.0.1\n", n.resolvConf())
}
