package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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

	// net is the Plan built on this machine: namespaces, the processes in
	// them, the state directory.
	net *topology.Net
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
	net := topology.New(topology.Config{Plan: cfg.Plan, StateDir: cfg.StateDir, BinDir: cfg.BinDir, Stdout: cfg.Stdout, Stderr: cfg.Stderr})
	return &Lab{cfg: cfg, net: net}, nil
}

// Plan is the lab's topology.
func (l *Lab) Plan() *topology.Plan { return l.cfg.Plan }

// ManifestsPath is the --services file of svcproxy and clusterdns.
func (l *Lab) ManifestsPath() string { return filepath.Join(l.cfg.StateDir, "services.yaml") }

// Mode is the mode svcproxy was last started in.
func (l *Lab) Mode() (string, error) { return l.net.Mode() }

// Exec runs argv in the namespace of host, with the given standard streams
// (nil: Config's Stdout and Stderr, no stdin); see topology.Net.Exec.
func (l *Lab) Exec(ctx context.Context, host string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return l.net.Exec(ctx, host, argv, stdin, stdout, stderr)
}

// Leftovers lists what the lab left on the machine; empty after Down (see
// topology.Net.Leftovers).
func (l *Lab) Leftovers() []string { return l.net.Leftovers() }

// checkMode says whether mode is one svcproxy takes.
func checkMode(mode string) error {
	if !validMode(mode) {
		return fmt.Errorf("mode %q: want one of %s", mode, strings.Join(Modes, ", "))
	}
	return nil
}
