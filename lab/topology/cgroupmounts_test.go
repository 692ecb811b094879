package topology

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCgroupMounts(t *testing.T) {
	const mountinfo = `23 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	require.Equal(t, []CgroupMount{
		{"cgroup", "rw,cpu", "/sys/fs/cgroup/cpu", "/", "0:29"},
		{"cgroup", "rw,name=systemd", "/sys/fs/cgroup/systemd", "/", "0:37"},
		{"cgroup2", "rw", "/sys/fs/cgroup/unified", "/", "0:38"},
	}, CgroupMounts(strings.NewReader(mountinfo)))
}

// A hierarchy mounted twice (a test's own mount of cgroup2) is the
// machine's once, at its first place; the lab's own mount is not the
// machine's.
func TestMachineMounts(t *testing.T) {
	const mountinfo = `32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
56 27 0:38 / /tmp/TestCompareKubeProxy582422155/002 rw,relatime - cgroup2 none rw
57 27 0:38 / /run/svclab/cgroup2 rw,relatime - cgroup2 cgroup2 rw
`
	require.Equal(t, []CgroupMount{
		{"cgroup", "rw,cpu", "/sys/fs/cgroup/cpu", "/", "0:29"},
		{"cgroup2", "rw", "/sys/fs/cgroup/unified", "/", "0:38"},
	}, machineMounts(CgroupMounts(strings.NewReader(mountinfo)), "/run/svclab/cgroup2"))
}
