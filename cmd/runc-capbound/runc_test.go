package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// TestPrivilegedContainer runs a privileged container (every capability in
// every set, as containerd asks for one) with the real runc, through the
// wrapper: it starts, and holds every capability of the machine's bounding
// set; `runc exec` of a privileged process into it does too. Without the
// wrapper, on a machine that withholds a capability, runc refuses it. The
// container is busybox in new namespaces (network included) and a cgroup of
// the test's, all removed at the end.
func TestPrivilegedContainer(t *testing.T) {
	netnstest.RequireRoot(t, "runc", "busybox")
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	machineBnd, err := parseBounding(status)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "runc-capbound")
	if out, err := exec.Command("go", "build", "-o", wrapper, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	state := filepath.Join(dir, "state") // runc --root: the containers' state, not the machine's
	rootfs := busyboxRoot(t, filepath.Join(dir, "rootfs"))

	// The bounding set as the container's status shows it: a CapEff line.
	wantEff := fmt.Sprintf("CapEff:\t%016x", uint64(machineBnd))

	t.Run("run", func(t *testing.T) {
		bundle := privilegedBundle(t, dir, "run", rootfs, "/bin/busybox", "grep", "^Cap", "/proc/self/status")
		out := runc(t, wrapper, state, "run", "--bundle", bundle, id(t))
		if !strings.Contains(out, wantEff) {
			t.Errorf("the container's capabilities:\n%s\nwant %q", out, wantEff)
		}
	})

	t.Run("exec", func(t *testing.T) {
		bundle := privilegedBundle(t, dir, "exec", rootfs, "/bin/busybox", "sleep", "60")
		cid := id(t)
		runc(t, wrapper, state, "create", "--bundle", bundle, cid)
		runc(t, wrapper, state, "start", cid)
		process := filepath.Join(dir, "process.json")
		writeJSON(t, process, map[string]any{
			"args": []string{"/bin/busybox", "grep", "^Cap", "/proc/self/status"}, "cwd": "/",
			"env": []string{"PATH=/bin"}, "user": map[string]int{"uid": 0, "gid": 0},
			"capabilities": everyCapability(),
		})
		out := runc(t, wrapper, state, "exec", "--process", process, cid)
		if !strings.Contains(out, wantEff) {
			t.Errorf("the exec'd process's capabilities:\n%s\nwant %q", out, wantEff)
		}
	})

	t.Run("without the wrapper", func(t *testing.T) {
		if len(withheld(machineBnd)) == 0 {
			t.Skip("this machine withholds no capability: runc starts privileged containers by itself")
		}
		real, err := exec.LookPath("runc")
		if err != nil {
			t.Fatal(err)
		}
		bundle := privilegedBundle(t, dir, "plain", rootfs, "/bin/busybox", "true")
		cid := id(t)
		cmd := exec.Command(real, "--root", state, "run", "--bundle", bundle, cid)
		out, err := cmd.CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte("apply caps")) {
			t.Errorf("runc without the wrapper, on a machine withholding %v: %v\n%s\nwant it to fail applying the capabilities", withheld(machineBnd), err, out)
		}
	})
}

// withheld lists the capabilities b lacks.
func withheld(b bounding) []string {
	var names []string
	for name := range capBits {
		if !b.allows(name) {
			names = append(names, name)
		}
	}
	return names
}

// id names a container after the test, unique on the machine.
func id(t *testing.T) string {
	cid := fmt.Sprintf("capbound-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	return strings.ToLower(cid)
}

// runc runs the wrapper (RUNC_CAPBOUND_RUNC unset: it finds Debian's runc on
// PATH), fails the test on an error, and returns the output; a container it
// created is deleted when the test ends.
func runc(t *testing.T, wrapper, state string, args ...string) string {
	t.Helper()
	argv := append([]string{"--root", state}, args...)
	// Output to a file, not a pipe: a container that runc create starts
	// inherits it, and a pipe would keep Wait waiting until it exits.
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(wrapper, argv...)
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	out, _ := os.ReadFile(f.Name())
	if args[0] == "create" || args[0] == "run" {
		cid := args[len(args)-1]
		t.Cleanup(func() {
			exec.Command(wrapper, "--root", state, "delete", "--force", cid).Run()
		})
	}
	if err != nil {
		t.Fatalf("runc %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// busyboxRoot makes a root filesystem holding Debian's static busybox.
func busyboxRoot(t *testing.T, root string) string {
	t.Helper()
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b[:min(len(b), 4096)], []byte("/lib64/ld-linux")) {
		t.Skip("needs a static busybox (Debian's busybox-static; make deps)")
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// everyCapability is a privileged process's capabilities: every name in
// every set but ambient, as containerd's CRI asks for a privileged container.
func everyCapability() map[string][]string {
	var all []string
	for _, c := range allCaps() {
		all = append(all, c.(string))
	}
	return map[string][]string{"bounding": all, "effective": all, "permitted": all, "inheritable": all}
}

// privilegedBundle writes a bundle whose config.json is runc's default spec
// (`runc spec`: new pid, network, ipc, uts and mount namespaces) with every
// capability, the given command, and a cgroup of the test's own, removed at
// the end.
func privilegedBundle(t *testing.T, dir, name, rootfs string, args ...string) string {
	t.Helper()
	bundle := filepath.Join(dir, "bundle-"+name)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("runc", "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	var spec map[string]any
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	process := spec["process"].(map[string]any)
	process["terminal"] = false
	process["args"] = args
	process["capabilities"] = everyCapability()
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	cgroup := fmt.Sprintf("/svcproxy-capbound-%d-%s", os.Getpid(), name)
	spec["linux"].(map[string]any)["cgroupsPath"] = cgroup
	t.Cleanup(func() { removeCgroup(t, cgroup) })
	writeJSON(t, filepath.Join(bundle, "config.json"), spec)
	return bundle
}

// removeCgroup removes what runc left of a cgroup in each v1 hierarchy or
// in the v2 one (runc delete removes it; this covers a failed start).
func removeCgroup(t *testing.T, cgroup string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroup)
	if d := "/sys/fs/cgroup" + cgroup; exists(d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		for i := 0; ; i++ {
			err := os.Remove(d)
			if err == nil || os.IsNotExist(err) {
				break
			}
			if i == 50 {
				t.Errorf("cgroup %s left behind: %v", d, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func writeJSON(t *testing.T, file string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
