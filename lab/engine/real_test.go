package engine_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/testbin"
	"github.com/svcproxy/svcproxy/lab/engine"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// TestEngine starts the real dockerd in its namespaces, imports a one-file
// root filesystem, runs it privileged, and stops the engine: the machine's
// own namespace gains no rule, link or sysctl, and nothing is left.
func TestEngine(t *testing.T) {
	netnstest.RequireRoot(t, "nsenter", "unshare", "mount", "iptables-save")
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("needs dockerd on PATH (Debian's docker.io; `make deps` installs it)")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("needs busybox (Debian's busybox-static; `make deps` installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	bin := testbin.Build(t, "./cmd/runc-capbound")
	state, err := os.MkdirTemp("", "svceng-")
	if err != nil {
		t.Fatal(err)
	}
	// Start refuses a state directory that exists.
	os.Remove(state)
	name := fmt.Sprintf("svceng-%d", os.Getpid())
	e := engine.New(engine.Config{Name: name, StateDir: state, Runc: filepath.Join(bin, "runc-capbound")})

	before := machine(t)
	start := time.Now()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			if err := e.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		}
	})
	t.Logf("dockerd answered on %s after %v", e.Socket(), time.Since(start).Round(time.Millisecond))

	if err := e.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := e.Docker(ctx, nil, "info", "--format", "{{.Driver}} {{.CgroupDriver}} {{.DefaultRuntime}} {{.DockerRootDir}}")
	if err != nil {
		t.Fatal(err)
	}
	if want := "overlay2 cgroupfs capbound " + filepath.Join(state, "data"); strings.TrimSpace(info) != want {
		t.Errorf("docker info: %q, want %q", strings.TrimSpace(info), want)
	}

	// A root filesystem of one static program, imported as kind's node
	// image is: from a tar, no registry.
	if _, err := e.Docker(ctx, rootfs(t, busybox), "import", "--change", `ENTRYPOINT ["/bin/busybox"]`, "-", "svcproxy.test/tiny:dev"); err != nil {
		t.Fatal(err)
	}
	// Privileged as kind runs its nodes: every capability this machine's
	// bounding set has, and mounts allowed.
	out, err := e.Docker(ctx, nil, "run", "--rm", "--privileged", "svcproxy.test/tiny:dev",
		"sh", "-c", "mkdir /m && mount -t tmpfs t /m && grep CapEff /proc/self/status")
	if err != nil {
		t.Fatalf("privileged container: %v\n%s", err, out)
	}
	// Docker 20.10's list of capabilities ends at CAP_AUDIT_READ (37): it
	// grants none of the newer ones (PERFMON, BPF, CHECKPOINT_RESTORE).
	const known = 1<<38 - 1
	eff, bnd := capField(t, out, "CapEff"), capField(t, readFile(t, "/proc/self/status"), "CapBnd")
	if eff&^bnd != 0 || eff != bnd&known {
		t.Errorf("privileged container's CapEff %x, want this machine's bounding set %x up to CAP_AUDIT_READ", eff, bnd)
	}

	// The bridge is the engine's: in its namespace, not the machine's.
	links, err := exec.Command("ip", "-n", name, "-o", "link", "show", "docker0").CombinedOutput()
	if err != nil {
		t.Errorf("docker0 in the engine's namespace: %v: %s", err, links)
	}
	rules, err := exec.Command("ip", "netns", "exec", name, "iptables-save").CombinedOutput()
	if err != nil || !strings.Contains(string(rules), ":DOCKER ") {
		t.Errorf("the engine's namespace has no DOCKER chain: %v\n%s", err, rules)
	}
	if during := machine(t); !slices.Equal(during.rules, before.rules) {
		t.Errorf("the machine's iptables changed while the engine ran:\n%s", diff(before.rules, during.rules))
	}

	start = time.Now()
	stopped = true
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %v", time.Since(start).Round(time.Millisecond))
	after := machine(t)
	if !slices.Equal(after.rules, before.rules) {
		t.Errorf("the machine's iptables changed:\n%s", diff(before.rules, after.rules))
	}
	for _, l := range after.links {
		if !slices.Contains(before.links, l) && dockerish.MatchString(l) {
			t.Errorf("the machine's namespace gained the link %s", l)
		}
	}
	if after.sysctls != before.sysctls {
		t.Errorf("the machine's sysctls changed: %s, then %s", before.sysctls, after.sysctls)
	}
	left := []string{state, "/run/netns/" + name}
	for _, h := range []string{"memory", "devices", "pids", "cpu"} {
		left = append(left, filepath.Join("/sys/fs/cgroup", h, e.CgroupParent()))
	}
	for _, p := range left {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("left after Stop: %s", p)
		}
	}
	if m := readFile(t, "/proc/self/mountinfo"); strings.Contains(m, state) {
		t.Errorf("mounts left under %s:\n%s", state, m)
	}
	if out, _ := exec.Command("pgrep", "-f", state).Output(); len(out) > 0 {
		t.Errorf("processes left: %s", out)
	}
}

// dockerish are the names dockerd gives links: docker0, a network's bridge
// br-<12 hex>, a container's host end veth<7 hex>. Other tests' links (which
// may pass through the machine's namespace while this test runs) are named
// otherwise, so this test does not compare the whole list.
var dockerish = regexp.MustCompile(`^(docker\d+|br-[0-9a-f]{12}|veth[0-9a-f]{7})$`)

type machineState struct {
	rules   []string // iptables-save and ip6tables-save, without counters
	links   []string
	sysctls string
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// machine is the machine's own namespace, as this test can see it.
func machine(t *testing.T) machineState {
	t.Helper()
	var s machineState
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(save).Output()
		if err != nil {
			t.Fatalf("%s: %v", save, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				s.rules = append(s.rules, counters.ReplaceAllString(l, ""))
			}
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			s.links = append(s.links, strings.TrimSuffix(strings.Split(f[1], "@")[0], ":"))
		}
	}
	for _, p := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/bridge/bridge-nf-call-iptables"} {
		b, _ := os.ReadFile(p)
		s.sysctls += filepath.Base(p) + "=" + strings.TrimSpace(string(b)) + " "
	}
	return s
}

func diff(a, b []string) string {
	var sb strings.Builder
	for _, l := range a {
		if !slices.Contains(b, l) {
			sb.WriteString("- " + l + "\n")
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			sb.WriteString("+ " + l + "\n")
		}
	}
	return sb.String()
}

// rootfs is a tar of /bin/busybox (static) and /bin/sh, a link to it.
func rootfs(t *testing.T, busybox string) *bytes.Buffer {
	t.Helper()
	prog, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(prog))},
		{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777},
		{Name: "proc/", Typeflag: tar.TypeDir, Mode: 0o555},
		{Name: "sys/", Typeflag: tar.TypeDir, Mode: 0o555},
		{Name: "dev/", Typeflag: tar.TypeDir, Mode: 0o755},
	} {
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := w.Write(prog); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// capField is a capability set of /proc/PID/status ("CapEff:\t0000...").
func capField(t *testing.T, status, field string) uint64 {
	t.Helper()
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("%s: %v", field, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in %q", field, status)
	return 0
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
