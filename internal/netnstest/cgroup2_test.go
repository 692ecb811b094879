package netnstest

import "testing"

// The machine's mount of the whole cgroup2 hierarchy is the first one
// under /sys/fs/cgroup; a test's or the lab's second mount elsewhere, and a
// mount of a subtree, are not.
func TestCgroup2In(t *testing.T) {
	for _, c := range []struct{ name, mountinfo, want string }{
		{"beside cgroup v1", `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
56 27 0:38 / /tmp/TestX/001 rw,relatime - cgroup2 none rw
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`, "/sys/fs/cgroup/unified"},
		{"unified", `30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
`, "/sys/fs/cgroup"},
		{"a subtree only", `30 23 0:26 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw
57 27 0:26 / /run/svclab-cgroup2 rw - cgroup2 cgroup2 rw
`, ""},
		{"none", `32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
`, ""},
	} {
		if got := cgroup2In([]byte(c.mountinfo)); got != c.want {
			t.Errorf("%s: cgroup2In = %q, want %q", c.name, got, c.want)
		}
	}
}
