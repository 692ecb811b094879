package engine

import (
	"testing"
)

func TestCgroupV1(t *testing.T) {
	info := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 27 0:32 /kubepods /run/node/cgroup/memory rw,relatime - cgroup cgroup rw,memory
51 27 0:32 / /run/elsewhere/memory rw,relatime - cgroup cgroup rw,memory
`
	got := cgroupV1([]byte(info))
	want := []hierarchy{
		{"/sys/fs/cgroup/cpu", "cpu"},
		{"/sys/fs/cgroup/cpu,cpuacct", "cpu,cpuacct"},
		{"/sys/fs/cgroup/systemd", "name=systemd"},
	}
	if len(got) != len(want) {
		t.Fatalf("cgroupV1 = %v, want %v (cgroup2, bind mounts of a subtree and mounts elsewhere left out)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("cgroupV1[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestDockerdArgsKeepEverythingInStateDir(t *testing.T) {
	e := New(Config{Name: "e1", StateDir: "/run/x", Runc: "/opt/runc-capbound"})
	args := e.dockerdArgs("/usr/sbin/dockerd")
	want := map[string]string{
		"--host":                 "unix:///run/x/docker.sock",
		"--data-root":            "/run/x/data",
		"--exec-root":            "/run/x/exec",
		"--pidfile":              "/run/x/dockerd.pid",
		"--config-file":          "/run/x/daemon.json",
		"--add-runtime":          "capbound=/opt/runc-capbound",
		"--default-runtime":      "capbound",
		"--bip":                  DefaultBridge,
		"--default-address-pool": "base=" + DefaultPool + ",size=24",
		"--cgroup-parent":        "/enginelab-e1",
	}
	for i := 1; i+1 < len(args); i++ {
		if w, ok := want[args[i]]; ok {
			if args[i+1] != w {
				t.Errorf("%s %s, want %s", args[i], args[i+1], w)
			}
			delete(want, args[i])
		}
	}
	for flag := range want {
		t.Errorf("dockerd has no %s", flag)
	}
	if got := e.inside("true"); got[0] != "nsenter" || got[1] != "--mount=/run/x/ns/mnt" || got[2] != "--net=/run/netns/e1" {
		t.Errorf("inside = %v", got)
	}
}
