package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// svclab up starts every pod's server, and every command run in a pod or in
// the client, in the host's child of the lab's cgroup2 subtree (where the
// socket-LB hook of --mode socklb attaches); the node's and the outside
// host's processes stay out of it. svclab down removes the subtree and the
// lab's cgroup2 mount.
func TestCgroupSubtree(t *testing.T) {
	netnstest.RequireRoot(t, lab.DemoTools...)
	bin := build(t)
	t.Cleanup(func() { down(t, bin) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := svclab(ctx, bin, "up"); err != nil {
		t.Fatalf("svclab up: %v\n%s", err, out)
	}
	plan := topology.DefaultPlan()
	for _, h := range plan.Hosts {
		if h.Role != topology.RolePod {
			continue
		}
		pid, err := os.ReadFile(filepath.Join(lab.DefaultStateDir, "pod-"+h.Name+".pid"))
		if err != nil {
			t.Fatalf("pod %s: %v", h.Name, err)
		}
		if got, want := cgroup2Of(t, "/proc/"+strings.TrimSpace(string(pid))+"/cgroup"), "/svclab/pods/"+h.Name; got != want {
			t.Errorf("pod %s: its server (pid %s) is in cgroup %q, want %q", h.Name, strings.TrimSpace(string(pid)), got, want)
		}
	}
	for host, want := range map[string]string{
		"client":  "/svclab/pods/client",
		"web-1":   "/svclab/pods/web-1",
		"node":    cgroup2Of(t, "/proc/self/cgroup"),
		"outside": cgroup2Of(t, "/proc/self/cgroup"),
	} {
		out, err := svclab(ctx, bin, "exec", host, "--", "cat", "/proc/self/cgroup")
		if err != nil {
			t.Fatalf("svclab exec %s: %v\n%s", host, err, out)
		}
		if got := cgroup2In(out); got != want {
			t.Errorf("svclab exec %s: the command ran in cgroup %q, want %q\n%s", host, got, want, out)
		}
	}
	if out, err := svclab(ctx, bin, "down"); err != nil {
		t.Fatalf("svclab down: %v\n%s", err, out)
	}
	requireClean(t, bin)
	if _, err := os.Stat("/sys/fs/cgroup/unified/svclab"); err == nil {
		t.Errorf("svclab down left /sys/fs/cgroup/unified/svclab")
	}
}

// cgroup2Of is the cgroup2 path in a /proc/PID/cgroup file.
func cgroup2Of(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return cgroup2In(string(b))
}

// cgroup2In is the path of the "0::" line of /proc/PID/cgroup text, or a
// note saying there is none.
func cgroup2In(s string) string {
	for _, line := range strings.Split(s, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return fmt.Sprintf("(no cgroup2 line in %q)", s)
}
