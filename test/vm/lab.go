package vm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// The lab in the VM: `make lab-ipvs` boots the guest that NewLabGuest describes and
// runs `svclab demo` in it, so the demo's IPVS step meets a kernel with IPVS;
// `make lab-ipvs-shell` gives a shell there instead, for tutorials/07-ipvs.md.
// TestLab runs the same guest with the demo and the tutorial's commands.

// LabModules are what the lab loads on top of IPVSModules: the matches and targets
// of iptables mode (DNAT, the statistic match, ClientIP affinity's recent match) and
// veth for the pods' links.
var LabModules = append(slices.Clip(IPVSModules), "xt_nat", "xt_statistic", "xt_recent", "xt_multiport")

// LabTools are the host programs the guest gets besides busybox: what svclab runs
// (lab.DemoTools), the IPVS and ip set tools the tutorial shows, and iproute2's ip,
// whose `ip netns` busybox's ip lacks.
var LabTools = append(slices.Clip(lab.DemoTools), "ipvsadm")

// LabPrograms are the lab's own programs, built for the guest by BuildLab.
var LabPrograms = []string{"svclab", "svcproxy", "clusterdns"}

// BuildLab builds svclab, svcproxy and clusterdns into dir, static and with the
// flags of the other guest binaries (goBuild's), so the build cache serves them all.
func BuildLab(ctx context.Context, dir string) error {
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}
	for _, p := range LabPrograms {
		args = append(args, "github.com/svcproxy/svcproxy/cmd/"+p)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// NewLabGuest is a guest that runs command with the lab's programs from binDir
// (BuildLab's) in /bin, the host's tools of LabTools with their libraries, and the
// legacy iptables and ipset (AddIPTables). The files `ip netns` needs are there: the
// /var/run/netns it pins namespaces under (/var/run is /run), and an /etc/resolv.conf
// to mount each host's resolv.conf over.
func NewLabGuest(binDir string, command ...string) (Guest, error) {
	g := Guest{
		Modules:  LabModules,
		Files:    map[string]string{},
		Data:     map[string][]byte{"/etc/resolv.conf": nil, "/etc/hostname": []byte("ipvs-vm\n")},
		Symlinks: map[string]string{"/var/run": "../run"},
		Command:  command,
	}
	for _, p := range LabPrograms {
		bin := filepath.Join(binDir, p)
		if _, err := os.Stat(bin); err != nil {
			return g, fmt.Errorf("lab program %s: %w (vm.BuildLab builds it)", p, err)
		}
		g.Files["/bin/"+p] = bin
	}
	for _, tool := range LabTools {
		host, err := exec.LookPath(tool)
		if err != nil {
			return g, fmt.Errorf("the lab in the VM needs the host's %s: %w (make deps installs it)", tool, err)
		}
		if err := g.AddHostBinary("/bin/"+tool, host); err != nil {
			return g, err
		}
	}
	if err := g.AddIPTables(); err != nil {
		return g, err
	}
	return g, nil
}

// DemoCommand is what `make lab-ipvs` runs in the guest: the file-fed demo (the
// control plane's programs are not in the VM), its output through a pipe so
// svclab draws no progress bars on the serial console.
var DemoCommand = []string{"/bin/sh", "-c", labEnv + "set -o pipefail; svclab demo --control-plane=false 2>&1 | cat"}

// labEnv gives the lab's timeouts ten times as long (topology.SlowdownEnv): under TCG the
// guest runs several times slower than the host, more on a busy machine.
const labEnv = "export " + topology.SlowdownEnv + "=10; "

// ShellCommand is `make lab-ipvs-shell`'s: a login shell on the console, with a
// controlling terminal (cttyhack) so Ctrl-C reaches the command it runs. Leaving
// the shell powers the VM off.
var ShellCommand = []string{"/bin/setsid", "/bin/cttyhack", "/bin/sh", "-c", labEnv + shellProfile + "exec /bin/sh -i"}

const shellProfile = `export PS1='ipvs-vm# '
echo
echo "A Debian kernel with IPVS ($(uname -r)), under QEMU. svclab, svcproxy,"
echo "clusterdns, ipvsadm, ipset and iptables are on PATH; nothing routes out."
echo "Try: svclab up --mode ipvs. Leave with exit (or Ctrl-A x)."
echo
`

// GuestOutput follows the console and keeps what the guest's command printed: the
// lines between /init's ready line and its result line (not the firmware's, nor
// the kernel's boot messages).
type GuestOutput struct {
	started, done bool
}

// Line reports whether console line l is the command's output.
func (o *GuestOutput) Line(l string) bool {
	switch {
	case o.done:
		return false
	case strings.Contains(l, resultMarker):
		o.done = true
		return false
	case strings.Contains(l, readyMarker):
		o.started = true
		return false
	}
	return o.started
}
