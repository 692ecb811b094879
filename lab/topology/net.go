package topology

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Config says where a Net keeps things.
type Config struct {
	// Plan is the topology; nil is DefaultPlan.
	Plan *Plan
	// StateDir holds pid files, logs and what one svclab command leaves for
	// the next.
	StateDir string
	// BinDir is where svcproxy and clusterdns are looked for first; PATH is
	// searched after it.
	BinDir string
	// Stdout and Stderr get a command's output when Exec is given none.
	Stdout, Stderr io.Writer
	// CgroupName is the lab's cgroup root in every hierarchy; "" is
	// CgroupRoot (another name only in tests that must not meet a running
	// lab's).
	CgroupName string
}

// Net is the Plan built on this machine: its network namespaces, the
// processes svclab started in them, and the state directory that svclab
// commands run one after the other (`svclab up`, then `svclab traffic`...)
// share: everything a Net knows beyond its Config is there.
type Net struct {
	cfg     Config
	cgroups *Cgroups
	bpffs   *BPFFS

	mu       sync.Mutex
	children []*exec.Cmd // started by this process, reaped by it
}

// New returns the Net of cfg, its zero fields filled in.
func New(cfg Config) *Net {
	if cfg.Plan == nil {
		cfg.Plan = DefaultPlan()
	}
	if cfg.CgroupName == "" {
		cfg.CgroupName = CgroupRoot
	}
	return &Net{cfg: cfg, cgroups: NewCgroups(cfg.StateDir, cfg.CgroupName), bpffs: &BPFFS{stateDir: cfg.StateDir}}
}

// Plan is the topology.
func (n *Net) Plan() *Plan { return n.cfg.Plan }

// StateDir is the directory every svclab command of this lab shares.
func (n *Net) StateDir() string { return n.cfg.StateDir }

// Cgroups is the lab's cgroup root and subtree.
func (n *Net) Cgroups() *Cgroups { return n.cgroups }

// BPFFS is the lab's bpffs, where svcproxy pins the socket LB.
func (n *Net) BPFFS() *BPFFS { return n.bpffs }

// NodeNamespace is the node's network namespace.
func (n *Net) NodeNamespace() string { return n.cfg.Plan.Namespace(n.cfg.Plan.Node.Name) }

// Exec runs argv in the namespace of host, with the given standard streams
// (nil: Config's Stdout and Stderr, no stdin). `ip netns exec` bind-mounts the
// host's resolv.conf over /etc/resolv.conf, so names resolve as in a pod.
func (n *Net) Exec(ctx context.Context, host string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(argv) == 0 {
		return errors.New("exec: no command")
	}
	if stdout == nil {
		stdout = n.cfg.Stdout
	}
	if stderr == nil {
		stderr = n.cfg.Stderr
	}
	cmd, release, err := n.Command(ctx, host, argv)
	if err != nil {
		return err
	}
	defer release()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.WaitDelay = time.Second
	return cmd.Run()
}

// Command is `ip netns exec NS argv...` for a lab host that is up, to start
// in the host's cgroup when it has one in the lab's subtree (a pod, the
// client: see InSubtree), as `kubectl exec` runs a command in the
// container's cgroups. The caller calls release once cmd has started.
func (n *Net) Command(ctx context.Context, host string, argv []string) (cmd *exec.Cmd, release func(), err error) {
	h, ok := n.Host(host)
	if !ok {
		return nil, nil, fmt.Errorf("host %q: no such lab host (want one of %s)", host, strings.Join(n.HostNames(), ", "))
	}
	if err := n.CheckUp(host); err != nil {
		return nil, nil, err
	}
	ns := n.cfg.Plan.Namespace(host)
	cmd = exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
	release, err = n.cgroups.Place(cmd, h)
	if err != nil {
		return nil, nil, err
	}
	return cmd, release, nil
}

// CheckUp says when host's namespace is missing.
func (n *Net) CheckUp(host string) error {
	ns := n.cfg.Plan.Namespace(host)
	if _, err := os.Stat(filepath.Join(NetnsDir, ns)); err != nil {
		return fmt.Errorf("host %s: no namespace %s: the lab is not up (svclab up)", host, ns)
	}
	return nil
}

// NodeOutput runs argv in the node and returns its standard output; the
// error carries its standard error.
func (n *Net) NodeOutput(ctx context.Context, argv ...string) (string, error) {
	var out, errb bytes.Buffer
	if err := n.Exec(ctx, n.cfg.Plan.Node.Name, argv, nil, &out, &errb); err != nil {
		return out.String(), fmt.Errorf("%s in the node: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Binary finds svcproxy or clusterdns: in BinDir first, then on PATH.
func (n *Net) Binary(name string) (string, error) {
	p := filepath.Join(n.cfg.BinDir, name)
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s: not found in %s nor on PATH; build it: go build -o bin/ ./cmd/...", name, n.cfg.BinDir)
}
