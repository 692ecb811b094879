package topology

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCgroupSubtree makes the lab's cgroup2 subtree under a name of its own
// (so a running lab is not touched), starts a process for a pod, the client
// and the outside host the way the lab starts them, and checks where each
// was born: the pod and the client in their child of the subtree, the
// outside host where this test runs. Then Remove kills what runs
// there and leaves nothing: no directory in any hierarchy, no mount.
func TestCgroupSubtree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts cgroup2 and makes cgroups (run `make test` as root)")
	}
	c := NewCgroups(filepath.Join(t.TempDir(), "state"), fmt.Sprintf("svclab-test-%d", os.Getpid()))
	t.Cleanup(func() {
		require.NoError(t, c.Remove())
		require.Empty(t, c.Leftovers())
	})
	require.NoError(t, c.MakeSubtree())
	root, err := c.Subtree()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(c.privateCgroup2(), c.Name()), root)

	p := DefaultPlan()
	pod, client, outside := p.Hosts[1], p.Hosts[0], Host{}
	for _, h := range p.Hosts {
		if h.Role == RoleOutside {
			outside = h
		}
	}
	require.Equal(t, RolePod, pod.Role)
	require.Equal(t, RoleClient, client.Role)
	require.Equal(t, RoleOutside, outside.Role)

	self := ownCgroup2(t, os.Getpid())
	for _, tt := range []struct {
		host Host
		want string // the path /proc/PID/cgroup names, in the cgroup2 line
	}{
		{pod, "/" + c.Name() + "/pods/" + pod.Name},
		{client, "/" + c.Name() + "/pods/client"},
		{outside, self},
	} {
		cmd := exec.Command("sleep", "60")
		release, err := c.Place(cmd, tt.host)
		require.NoError(t, err)
		err = cmd.Start()
		release()
		require.NoError(t, err)
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		require.Equal(t, tt.want, ownCgroup2(t, cmd.Process.Pid), "host %s", tt.host.Name)
	}
	// Remove kills the pod's and the client's sleep, not the outside's.
	require.NotEmpty(t, c.Leftovers())
	require.NoError(t, c.Remove())
	require.Empty(t, c.Leftovers())
	_, err = os.Stat(filepath.Join("/sys/fs/cgroup/unified", c.Name()))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = c.Subtree()
	require.ErrorContains(t, err, "the lab is not up")
}

// ownCgroup2 is process pid's cgroup in the cgroup2 hierarchy: the "0::"
// line of /proc/PID/cgroup.
func ownCgroup2(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	t.Fatalf("process %d: no cgroup2 line in /proc/%d/cgroup:\n%s", pid, pid, b)
	return ""
}
