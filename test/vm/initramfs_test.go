package vm

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

func TestArchiveIsNewcCpio(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("needs cpio to read the archive back")
	}
	a := archive{}
	a.data("/bin/hello", []byte("#!/bin/sh\necho hi\n"), 0o755)
	a.symlink("/bin/sh", "busybox")
	a.dir("/proc")
	var buf bytes.Buffer
	if err := a.writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cpio", "-it", "--quiet")
	cmd.Stdin = &buf
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -it: %v", err)
	}
	if got, want := string(out), "bin\nbin/hello\nbin/sh\nproc\n"; got != want {
		t.Errorf("cpio -it = %q, want %q", got, want)
	}
}

func TestInitScript(t *testing.T) {
	s := initScript(Guest{Modules: []string{"ip_vs", "dummy"}, Command: []string{"/bin/t", "-test.run=A|B", "it's"}})
	for _, want := range []string{
		"for m in ip_vs dummy; do",
		`'/bin/t' '-test.run=A|B' 'it'\''s'`,
		`echo "SVCPROXY-VM-RESULT $? uptime=`,
		"poweroff -f",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("init script lacks %q:\n%s", want, s)
		}
	}
}

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/arch/x86/crypto/crc32c-intel.ko":   "crc32c_intel",
		"kernel/net/netfilter/ipvs/ip_vs_rr.ko.xz": "ip_vs_rr",
	} {
		if got := moduleName(in); got != want {
			t.Errorf("moduleName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAddHostBinary(t *testing.T) {
	const ipset = "/usr/sbin/ipset"
	if _, err := exec.LookPath(ipset); err != nil {
		t.Skip("needs ipset on the host")
	}
	var g Guest
	if err := g.AddHostBinary("/bin/ipset", ipset); err != nil {
		t.Fatal(err)
	}
	var libs []string
	for p := range g.Files {
		libs = append(libs, p)
	}
	joined := strings.Join(libs, " ")
	for _, want := range []string{"/bin/ipset", "libipset.so", "libc.so.6", "ld-linux-x86-64.so.2"} {
		if !strings.Contains(joined, want) {
			t.Errorf("guest files %v lack %s", libs, want)
		}
	}
}

func TestSplitSections(t *testing.T) {
	lines := []string{"boot noise", sectionMarker + "demo", "## 1. Build the lab", statusMarker + "0",
		sectionMarker + "07-ipvs.md 0", "HOST NAMESPACE", statusMarker + "1"}
	got := splitSections(lines)
	if s := got["demo"]; s.out != "## 1. Build the lab" || s.status != 0 {
		t.Errorf("demo = %+v", s)
	}
	if s := got["07-ipvs.md 0"]; s.out != "HOST NAMESPACE" || s.status != 1 {
		t.Errorf("07-ipvs.md 0 = %+v", s)
	}
}
