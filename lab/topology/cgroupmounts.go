package topology

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strings"
)

// CgroupMount is one cgroup hierarchy as the machine mounts it.
type CgroupMount struct {
	Fstype  string // cgroup or cgroup2
	Options string // the superblock's: "rw,cpu", "rw,name=systemd"
	Point   string // /sys/fs/cgroup/cpu
	Root    string // the directory of the hierarchy mounted there: "/"
	Dev     string // the superblock, "0:29": two mounts of one hierarchy share it
}

// CgroupMounts reads the machine's cgroup hierarchies from a mountinfo file.
func CgroupMounts(r io.Reader) []CgroupMount {
	var out []CgroupMount
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		out = append(out, CgroupMount{Fstype: g[0], Options: g[2], Point: f[4], Root: f[3], Dev: f[2]})
	}
	return out
}

// Machine are the machine's cgroup hierarchies, as the machine mounts them:
// the lab's own cgroup2 mount (cgroup.go) left out, and each hierarchy once
// (machineMounts).
func (c *Cgroups) Machine() []CgroupMount {
	return machineMounts(c.mounts(), c.privateCgroup2())
}

// machineMounts are mounts without the one at private, and without a second
// mount of a hierarchy already listed: a test that mounts the machine's
// cgroup2 again in a directory of its own (/tmp/TestX/001) made the real
// node mount it there too, which the kernel refuses ("cgroup2 already
// mounted on /sys/fs/cgroup/unified") while the first mount stands.
func machineMounts(mounts []CgroupMount, private string) []CgroupMount {
	var out []CgroupMount
	seen := map[string]bool{}
	for _, m := range mounts {
		if m.Point != private && !seen[m.Dev] {
			seen[m.Dev] = true
			out = append(out, m)
		}
	}
	return out
}

// mounts are every cgroup mount this process sees.
func (c *Cgroups) mounts() []CgroupMount {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	return CgroupMounts(bytes.NewReader(b))
}

// hierarchies are the cgroup hierarchies mounted, each once (the machine's
// mount first, the lab's cgroup2 mount when the machine mounts none): to
// walk every cgroup directory of the lab once.
func (c *Cgroups) hierarchies() []CgroupMount {
	seen := map[string]bool{}
	var out []CgroupMount
	for _, m := range append(c.Machine(), c.mounts()...) {
		if !seen[m.Dev] && m.Root == "/" {
			seen[m.Dev] = true
			out = append(out, m)
		}
	}
	return out
}
