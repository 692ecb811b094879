// Package kind brings up a kind v0.33.0 cluster on this machine, as a user
// of deploy/kind would, and takes it down again (`make kind-up`, `make
// kind-down`, docs/kind.md):
//
//  1. lab/engine's dockerd, in namespaces of its own, with a state directory
//     of its own (StateDir/engine, apart from svclab's /run/svclab);
//  2. the node image (`make kind-image`) loaded into it (`docker load`);
//  3. `kind create cluster` with deploy/kind/cluster.yaml and, merged into it,
//     this machine's settings (host-patch.yaml beside this file: cgroup v1,
//     no CAP_SYS_RESOURCE), the kubeconfig under StateDir, never
//     ~/.kube/config;
//  4. `kind load image-archive` of svcproxy's image, then, as deploy/kind's
//     steps say, CoreDNS scaled to zero and `kubectl apply -k deploy/kind`;
//     Up returns once the nodes are Ready and svcproxy and clusterdns rolled
//     out.
//
// kind's API server is published on the engine's namespace's loopback:
// Kubectl runs kubectl there (nsenter --net).
package kind

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/lab/engine"
)

// Defaults: the engine's namespace and state, apart from svclab's, and
// the cluster's name, which deploy/kind's `apiserver-host:
// kind-control-plane` assumes. Not "svclab-" anything: `svclab down`
// removes /run/svclab and deletes every network namespace whose name starts
// with "svclab-" (and stops what runs in it), and the lab's tests count
// mounts with "/svclab-" in their path as its leftovers.
const (
	DefaultStateDir = "/run/kindlab"
	EngineName      = "kindlab"
	ClusterName     = "kind"
	// NodeImageRef is images/kindnode's Ref.
	NodeImageRef = "svcproxy.test/kind-node:v1.37.2"
)

// HostPatch is this machine's settings for kind's nodes, kept apart from
// deploy/kind/cluster.yaml (the file users copy); Up merges it in.
//
//go:embed host-patch.yaml
var HostPatch []byte

// Config names the programs and files. Paths may be relative to the
// repository's root, which must be the working directory.
type Config struct {
	StateDir string // "" is DefaultStateDir
	// EngineName is the engine's network namespace; "" is EngineName.
	EngineName string
	Kind       string // kind v0.33.0 (make kind-bin)
	Kubectl    string // kubectl v1.37.2
	Runc       string // runc-capbound, the engine's runtime
	NodeImage  string // make kind-image's archive
	// ClusterConfig is deploy/kind/cluster.yaml; SvcproxyImage make image's
	// archive; Kustomization deploy/kind.
	ClusterConfig, SvcproxyImage, Kustomization string
	Log                                         io.Writer
}

// Cluster is a kind cluster in its engine.
type Cluster struct {
	cfg    Config
	Engine *engine.Engine
}

// New fills in the defaults; it starts nothing.
func New(cfg Config) *Cluster {
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.EngineName == "" {
		cfg.EngineName = EngineName
	}
	if cfg.ClusterConfig == "" {
		cfg.ClusterConfig = "deploy/kind/cluster.yaml"
	}
	if cfg.Kustomization == "" {
		cfg.Kustomization = "deploy/kind"
	}
	return &Cluster{cfg: cfg, Engine: engine.New(engine.Config{
		Name: cfg.EngineName, StateDir: filepath.Join(cfg.StateDir, "engine"), Runc: cfg.Runc,
	})}
}

// Kubeconfig is where kind writes the cluster's kubeconfig.
func (c *Cluster) Kubeconfig() string { return filepath.Join(c.cfg.StateDir, "kubeconfig") }

// Up makes the cluster and deploys svcproxy and clusterdns on it. On
// failure it leaves what it made for a look: Down removes it.
func (c *Cluster) Up(ctx context.Context) error {
	if _, err := os.Stat(c.cfg.StateDir); err == nil {
		return fmt.Errorf("kind: %s exists: a cluster is up, or was not taken down (make kind-down)", c.cfg.StateDir)
	}
	for _, f := range []string{c.cfg.Kind, c.cfg.Kubectl, c.cfg.Runc, c.cfg.NodeImage, c.cfg.SvcproxyImage, c.cfg.ClusterConfig} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("kind: %w", err)
		}
	}
	if err := os.MkdirAll(c.cfg.StateDir, 0o755); err != nil {
		return err
	}
	step := c.stepper()
	if err := step("start the engine", func() error { return c.Engine.Start(ctx) }); err != nil {
		return err
	}
	if err := step("docker load "+c.cfg.NodeImage, func() error {
		f, err := os.Open(c.cfg.NodeImage)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = c.Engine.Docker(ctx, f, "load", "--quiet")
		return err
	}); err != nil {
		return err
	}
	merged := filepath.Join(c.cfg.StateDir, "cluster.yaml")
	if err := step("merge "+c.cfg.ClusterConfig+" and the host patch", func() error {
		b, err := os.ReadFile(c.cfg.ClusterConfig)
		if err != nil {
			return err
		}
		m, err := MergeHostPatch(b, HostPatch)
		if err != nil {
			return err
		}
		return os.WriteFile(merged, m, 0o644)
	}); err != nil {
		return err
	}
	if err := step("kind create cluster", func() error {
		return c.kind(ctx, "create", "cluster", "--config", merged, "--image", NodeImageRef, "--retain")
	}); err != nil {
		return err
	}
	if err := step("kind load image-archive "+c.cfg.SvcproxyImage, func() error {
		return c.kind(ctx, "load", "image-archive", c.cfg.SvcproxyImage, "--name", ClusterName)
	}); err != nil {
		return err
	}
	if err := step("the nodes Ready (kindnet's CNI configuration)", func() error {
		_, err := c.Kubectl(ctx, nil, "wait", "--for=condition=Ready", "nodes", "--all", "--timeout=180s")
		return err
	}); err != nil {
		return err
	}
	return step("kubectl apply -k "+c.cfg.Kustomization, func() error {
		for _, args := range [][]string{
			{"-n", "kube-system", "scale", "deployment", "coredns", "--replicas=0"},
			{"apply", "-k", c.cfg.Kustomization},
			{"-n", "kube-system", "rollout", "status", "daemonset/svcproxy", "--timeout=180s"},
			{"-n", "kube-system", "rollout", "status", "deployment/clusterdns", "--timeout=180s"},
		} {
			if _, err := c.Kubectl(ctx, nil, args...); err != nil {
				return fmt.Errorf("%w\n%s", err, c.diagnose(ctx))
			}
		}
		return nil
	})
}

// Down deletes the cluster and stops the engine, removing everything under
// StateDir. It is safe when nothing is up.
func (c *Cluster) Down(ctx context.Context) error {
	var errs []error
	if c.Engine.Ping(ctx) == nil {
		if err := c.kind(ctx, "delete", "cluster", "--name", ClusterName); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Engine.Stop(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(c.cfg.StateDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Kubectl runs kubectl with the cluster's kubeconfig in the engine's network
// namespace, where kind publishes the API server, and returns its output.
func (c *Cluster) Kubectl(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	argv := append([]string{"--net=" + c.Engine.NetNS(), "--", c.cfg.Kubectl, "--kubeconfig", c.Kubeconfig()}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// kind runs kind against the engine, with the kubeconfig under StateDir.
func (c *Cluster) kind(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, c.cfg.Kind, args...)
	cmd.Env = append(os.Environ(), c.Engine.Env()...)
	cmd.Env = append(cmd.Env, "KUBECONFIG="+c.Kubeconfig())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	c.cfg.Log.Write(out.Bytes())
	if err != nil {
		return fmt.Errorf("kind %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func (c *Cluster) stepper() func(string, func() error) error {
	return func(name string, fn func() error) error {
		start := time.Now()
		fmt.Fprintf(c.cfg.Log, "kind: %s\n", name)
		if err := fn(); err != nil {
			return fmt.Errorf("kind: %s: %w", name, err)
		}
		fmt.Fprintf(c.cfg.Log, "kind: %s: %s\n", name, time.Since(start).Round(100*time.Millisecond))
		return nil
	}
}

// MergeHostPatch appends the patch's kubeadmConfigPatches and
// containerdConfigPatches to those of a kind Cluster configuration; the
// patch may set nothing else.
func MergeHostPatch(cluster, patch []byte) ([]byte, error) {
	var c, p map[string]any
	if err := yaml.Unmarshal(cluster, &c); err != nil {
		return nil, fmt.Errorf("cluster configuration: %w", err)
	}
	if err := yaml.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("host patch: %w", err)
	}
	for k, v := range p {
		if k != "kubeadmConfigPatches" && k != "containerdConfigPatches" {
			return nil, fmt.Errorf("host patch: %s: only kubeadmConfigPatches and containerdConfigPatches are merged", k)
		}
		list, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("host patch: %s: not a list", k)
		}
		have, _ := c[k].([]any)
		c[k] = append(have, list...)
	}
	return yaml.Marshal(c)
}

// diagnose is what kube-system's pods say, for an error: their list, the
// recent events, and the last lines of svcproxy's and clusterdns's logs.
func (c *Cluster) diagnose(ctx context.Context) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"-n", "kube-system", "get", "pods", "-o", "wide"},
		{"-n", "kube-system", "get", "events", "--sort-by=.lastTimestamp"},
		{"-n", "kube-system", "logs", "-l", "k8s-app=svcproxy", "--tail=20", "--prefix"},
		{"-n", "kube-system", "logs", "-l", "k8s-app=kube-dns", "--tail=20", "--prefix"},
	} {
		out, err := c.Kubectl(ctx, nil, args...)
		fmt.Fprintf(&b, "$ kubectl %s\n%s", strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	return b.String()
}
