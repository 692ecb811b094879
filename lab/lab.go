package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/pods"
	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/lab/views"
)

// DefaultStateDir holds the lab's pid files, logs and manifests while it is up.
const DefaultStateDir = "/run/svclab"

// DemoTools are the programs the demo runs besides svclab, svcproxy and
// clusterdns, and that the lab's commands need: ip, iptables-save, dig, curl.
var DemoTools = []string{"ip", "iptables-save", "dig", "curl"}

// Config says where a Lab keeps things and what it runs. The zero value is the
// default lab.
type Config struct {
	// Plan is the topology; nil is DefaultPlan.
	Plan *topology.Plan
	// Manifests are written to the state directory for svcproxy and clusterdns;
	// nil is the embedded manifests.yaml.
	Manifests []byte
	// Node is the node the views look at (svclab rules, trace, conntrack
	// --node): "" is the Plan's node; on the kubeadm cluster, a worker's
	// name ("worker1").
	Node string
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
}

// Lab is the lab on this machine. Its methods may be called from different
// processes one after the other (`svclab up`, then `svclab traffic`...):
// everything they share is in the state directory.
type Lab struct {
	cfg Config

	// net is the Plan built on this machine: namespaces, the processes in
	// them, the state directory.
	net *topology.Net
	// pods runs the pods' servers and sends them traffic.
	pods *pods.Runner
	// cluster is where Services and pods come from, and the node's
	// svcproxy and clusterdns.
	cluster *cluster.Cluster
	// views read the node's kernel state and show it.
	views *views.Views
}

// New returns a Lab with cfg's zero fields filled in.
func New(cfg Config) (*Lab, error) {
	if cfg.Plan == nil {
		cfg.Plan = topology.DefaultPlan()
	}
	if err := cfg.Plan.Validate(); err != nil {
		return nil, err
	}
	if cfg.Node != "" && cfg.Node != cfg.Plan.Node.Name {
		p, err := planOnNode(cfg.Plan, cfg.StateDir, cfg.Node)
		if err != nil {
			return nil, err
		}
		cfg.Plan = p
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
	runner := pods.New(pods.Config{Net: net, Self: cfg.Self, Stdout: cfg.Stdout, Progress: cfg.Progress})
	c := cluster.New(cluster.Config{Net: net, Pods: runner, Self: cfg.Self, Manifests: cfg.Manifests})
	l := &Lab{cfg: cfg, net: net, pods: runner, cluster: c}
	l.views = views.New(views.Config{Net: net, Source: c, Stdout: cfg.Stdout, SocketLB: l.socketLB})
	return l, nil
}

// Plan is the lab's topology.
func (l *Lab) Plan() *topology.Plan { return l.cfg.Plan }

// Stdout is where the lab's commands write (Config.Stdout).
func (l *Lab) Stdout() io.Writer { return l.cfg.Stdout }

// Net is the Plan built on this machine: its namespaces, the processes in
// them, the state directory.
func (l *Lab) Net() *topology.Net { return l.net }

// Pods runs the pods' servers and sends them traffic.
func (l *Lab) Pods() *pods.Runner { return l.pods }

// Views read the node's kernel state and show it: `svclab rules`, `svclab
// trace`, `svclab conntrack`, what `svclab web` draws.
func (l *Lab) Views() *views.Views { return l.views }

// Services is what `svclab web` shows of the lab's Services (see
// views.Views.Services).
func (l *Lab) Services(ctx context.Context) (*views.ServicesView, error) {
	return l.views.Services(ctx)
}

// TraceReport is `svclab trace` as data, for `svclab web` (see
// views.Views.TraceReport).
func (l *Lab) TraceReport(ctx context.Context, opts views.TraceOptions) (*views.TraceReport, error) {
	return l.views.TraceReport(ctx, opts)
}

// ConntrackReport is `svclab conntrack` as data, for `svclab web` (see
// views.Views.ConntrackReport).
func (l *Lab) ConntrackReport(ctx context.Context, opts views.ConntrackOptions) (*views.ConntrackView, error) {
	return l.views.ConntrackReport(ctx, opts)
}

// Cluster is where the lab's Services and pods come from: the manifests
// file or the control plane, the simulated kubelet or the real nodes; and
// the node's svcproxy and clusterdns (Cluster.Daemons).
func (l *Lab) Cluster() *cluster.Cluster { return l.cluster }

// Mode is the mode svcproxy was last started in.
func (l *Lab) Mode() (string, error) { return l.net.Mode() }

// Exec runs argv in the namespace of host, with the given standard streams
// (nil: Config's Stdout and Stderr, no stdin); see topology.Net.Exec.
func (l *Lab) Exec(ctx context.Context, host string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return l.net.Exec(ctx, host, argv, stdin, stdout, stderr)
}

// Traffic sends opts.N requests from a lab host and writes who answered
// (see pods.Runner.Traffic).
func (l *Lab) Traffic(ctx context.Context, opts pods.TrafficOptions) (*pods.Tally, error) {
	return l.pods.Traffic(ctx, opts)
}

// LogPath is the log of a process the lab started: "svcproxy",
// "clusterdns" (see topology.Net.LogPath).
func (l *Lab) LogPath(name string) string { return l.net.LogPath(name) }

// Leftovers lists what the lab left on the machine; empty after Down (see
// topology.Net.Leftovers).
func (l *Lab) Leftovers() []string { return l.net.Leftovers() }

// planOnNode is p with the lab's node n (a worker of the kubeadm cluster,
// recorded in the state directory) as its node: what runs "in the node"
// (the views' iptables-save, nft, conntrack) runs there. p's node, to
// which the client and the outside host stay linked, is its Gateway.
func planOnNode(p *topology.Plan, stateDir, n string) (*topology.Plan, error) {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	h, ok := topology.New(topology.Config{Plan: p, StateDir: stateDir}).Host(n)
	if !ok || h.Role != topology.RoleNode {
		return nil, fmt.Errorf("node %q: no such node in the lab (svclab up --nodes 3 makes %s, worker1 and worker2)", n, p.Node.Name)
	}
	on := *p
	on.Node, on.Gateway, on.Uplink = h, p.Node, cluster.NodeLink
	return &on, nil
}
