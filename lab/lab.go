package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// DefaultStateDir holds the lab's pid files, logs and manifests while it is up.
const DefaultStateDir = "/run/svclab"

// Modes svcproxy can run in (its --mode).
var Modes = []string{"userspace", "iptables", "nftables", "ipvs", "socklb", "hybrid"}

// Addresses of the node's own servers. Health and metrics stay on the node's
// loopback, as kube-proxy's metrics do; svclab reaches them by entering the
// node's namespace.
const (
	healthzAddr    = "127.0.0.1:10256"
	metricsAddr    = "127.0.0.1:10249"
	dnsMetricsAddr = "127.0.0.1:9153"
	// dnsUpstream is a closed port: the lab has no way out, so names outside
	// cluster.local fail at once (SERVFAIL) instead of timing out.
	dnsUpstream = "127.0.0.1:1"
)

// Config says where a Lab keeps things and what it runs. The zero value is the
// default lab.
type Config struct {
	// Plan is the topology; nil is DefaultPlan.
	Plan *topology.Plan
	// Manifests are written to the state directory for svcproxy and clusterdns;
	// nil is the embedded manifests.yaml.
	Manifests []byte
	// StateDir holds pid files, logs and the manifests; "" is DefaultStateDir.
	StateDir string
	// BinDir is where svcproxy and clusterdns are looked for first; "" is the
	// directory of the running executable. PATH is searched after it.
	BinDir string
	// Self is the svclab binary that pods run as `svclab pod`; "" is the
	// running executable.
	Self string
	// Stdout and Stderr get the commands' output; nil is os.Stdout, os.Stderr.
	Stdout, Stderr io.Writer
	// Progress draws a live progress bar during traffic (for terminals).
	Progress bool
	// ControlPlane, when not nil, is what Demo runs the lab on; nil is the
	// file-fed lab.
	ControlPlane *ControlPlane
	// DemoOnly, when not "", narrows Demo to the steps whose title contains it
	// (case-insensitive), between the first (build) and the last (down).
	DemoOnly string
}

// Lab is the lab on this machine. Its methods may be called from different
// processes one after the other (`svclab up`, then `svclab traffic`...):
// everything they share is in the state directory.
type Lab struct {
	cfg Config

	// inDemo makes Up record this process as the lab's owner, so that a
	// concurrent `svclab up` does not pull the lab from under the demo.
	inDemo bool

	// cg is the lab's cgroup root in every hierarchy, and its cgroup2
	// subtree.
	cg *topology.Cgroups

	mu       sync.Mutex
	children []*exec.Cmd // started by this process, reaped by it
}

// New returns a Lab with cfg's zero fields filled in.
func New(cfg Config) (*Lab, error) {
	if cfg.Plan == nil {
		cfg.Plan = topology.DefaultPlan()
	}
	if err := cfg.Plan.Validate(); err != nil {
		return nil, err
	}
	if cfg.Manifests == nil {
		cfg.Manifests = cluster.Manifests
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.Self == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find svclab's own binary: %w", err)
		}
		cfg.Self = self
	}
	if cfg.BinDir == "" {
		cfg.BinDir = filepath.Dir(cfg.Self)
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	return &Lab{cfg: cfg, cg: topology.NewCgroups(cfg.StateDir, topology.CgroupRoot)}, nil
}

// Plan is the lab's topology.
func (l *Lab) Plan() *topology.Plan { return l.cfg.Plan }

// ManifestsPath is the --services file of svcproxy and clusterdns.
func (l *Lab) ManifestsPath() string { return filepath.Join(l.cfg.StateDir, "services.yaml") }

// state is what one svclab command leaves for the next, in state.json.
type state struct {
	Mode string `json:"mode"`
	// Kubectl is set when the lab runs a control plane: svcproxy and
	// clusterdns then watch its API server (--kubeconfig) instead of the
	// manifests file.
	Kubectl string `json:"kubectl,omitempty"`
	// RealNode is set when a real kubelet runs the lab's pods (svclab up
	// --kubelet): svcproxy and clusterdns are its pods.
	RealNode bool `json:"realNode,omitempty"`
	// Demo is the pid of a `svclab demo` that owns the lab, 0 for none.
	Demo int `json:"demo,omitempty"`
	// IPVSScheduler is svcproxy's --ipvs-scheduler, "" for its default (rr).
	IPVSScheduler string `json:"ipvsScheduler,omitempty"`
	// Offload is hybrid's --offload, "" for its default (nftables).
	Offload string `json:"offload,omitempty"`
	// DemoteAfter is hybrid's --demote-after, "" for its default (5m).
	DemoteAfter string `json:"demoteAfter,omitempty"`
}

func (l *Lab) statePath() string { return filepath.Join(l.cfg.StateDir, "state.json") }

func (l *Lab) readState() (state, error) {
	var s state
	b, err := os.ReadFile(l.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return s, fmt.Errorf("the lab is not up (no %s): run `svclab up` first", l.statePath())
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", l.statePath(), err)
	}
	return s, nil
}

func (l *Lab) writeState(s state) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(l.statePath(), append(b, '\n'), 0o644)
}

// Mode is the mode svcproxy was last started in.
func (l *Lab) Mode() (string, error) {
	s, err := l.readState()
	return s.Mode, err
}

// binary finds svcproxy or clusterdns: next to svclab first, then on PATH.
func (l *Lab) binary(name string) (string, error) {
	p := filepath.Join(l.cfg.BinDir, name)
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s: not found in %s nor on PATH; build it: go build -o bin/ ./cmd/...", name, l.cfg.BinDir)
}

// Exec runs argv in the namespace of host, with the given standard streams
// (nil: Config's Stdout and Stderr, no stdin). `ip netns exec` bind-mounts the
// host's resolv.conf over /etc/resolv.conf, so names resolve as in a pod.
func (l *Lab) Exec(ctx context.Context, host string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(argv) == 0 {
		return errors.New("exec: no command")
	}
	if stdout == nil {
		stdout = l.cfg.Stdout
	}
	if stderr == nil {
		stderr = l.cfg.Stderr
	}
	cmd, release, err := l.command(ctx, host, argv)
	if err != nil {
		return err
	}
	defer release()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.WaitDelay = time.Second
	return cmd.Run()
}

// command is `ip netns exec NS argv...` for a lab host that is up, to start
// in the host's cgroup when it has one in the lab's subtree (a pod, the
// client: see inSubtree), as `kubectl exec` runs a command in the
// container's cgroups. The caller calls release once cmd has started.
func (l *Lab) command(ctx context.Context, host string, argv []string) (cmd *exec.Cmd, release func(), err error) {
	h, ok := l.host(host)
	if !ok {
		return nil, nil, fmt.Errorf("host %q: no such lab host (want one of %s)", host, strings.Join(l.hostNames(), ", "))
	}
	if err := l.checkUp(host); err != nil {
		return nil, nil, err
	}
	ns := l.cfg.Plan.Namespace(host)
	cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
	release, err = l.cg.Place(cmd, h)
	if err != nil {
		return nil, nil, err
	}
	return cmd, release, nil
}

// checkMode says whether mode is one svcproxy takes.
func checkMode(mode string) error {
	if !validMode(mode) {
		return fmt.Errorf("mode %q: want one of %s", mode, strings.Join(Modes, ", "))
	}
	return nil
}

// checkUp says when host's namespace is missing.
func (l *Lab) checkUp(host string) error {
	ns := l.cfg.Plan.Namespace(host)
	if _, err := os.Stat(filepath.Join(topology.NetnsDir, ns)); err != nil {
		return fmt.Errorf("host %s: no namespace %s: the lab is not up (svclab up)", host, ns)
	}
	return nil
}

// host finds a lab host by name: in the Plan, or among the pods the
// control-plane lab's kubelet runs.
func (l *Lab) host(name string) (topology.Host, bool) {
	if h, ok := l.cfg.Plan.Host(name); ok {
		return h, true
	}
	return l.podRecord(name)
}

func (l *Lab) hostNames() []string {
	names := []string{l.cfg.Plan.Node.Name}
	for _, h := range l.cfg.Plan.Hosts {
		names = append(names, h.Name)
	}
	for _, h := range l.podRecords() {
		if _, ok := l.cfg.Plan.Host(h.Name); !ok {
			names = append(names, h.Name)
		}
	}
	return names
}

// names maps each host's address to its name, for reports: the Plan's and
// the kubelet's pods.
func (l *Lab) names() map[netip.Addr]string {
	m := l.cfg.Plan.Names()
	for _, h := range l.podRecords() {
		m[h.Addr] = h.Name
	}
	return m
}
