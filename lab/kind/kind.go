// Package kind brings up a kind v0.33.0 cluster on this machine, as a user
// of deploy/kind would, and takes it down again (`make kind-up`, `make
// kind-down`, docs/kind.md):
//
//  1. lab/engine's dockerd, in namespaces of its own, with a state directory
//     of its own (StateDir/engine, apart from svclab's /run/svclab);
//  2. the node image (`make kind-image`) loaded into it (`docker load`);
//  3. kind's docker network "kind", made before kind looks for it, in the
//     test address ranges (NodeSubnet, NodeSubnet6): kind uses a network of
//     that name as it finds it, and would give a network of its own an IPv6
//     range of its choosing in fc00::/8;
//  4. `kind create cluster` with deploy/kind/cluster.yaml and, merged into it,
//     this lab's settings (host-patch.yaml beside this file: the pod and
//     Service ranges in the test ranges; cgroup v1, no CAP_SYS_RESOURCE),
//     the kubeconfig under StateDir, never ~/.kube/config;
//  5. `kind load image-archive` of svcproxy's image, then, as deploy/kind's
//     steps say, CoreDNS scaled to zero and `kubectl apply -k` of
//     deploy/kind, through the overlay beside this file that gives svcproxy
//     the pod range of step 4; Up returns once the nodes are Ready and
//     svcproxy and clusterdns rolled out.
//
// Before step 1 Up waits until root may make the inotify instances the
// nodes' processes need (InotifyFree, InotifyInstances, InotifyWait), and after step
// 4 it waits until every node of the configuration has registered its Node.
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
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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
	// NetworkName is the docker network kind puts its nodes on.
	NetworkName = "kind"
	// NodeSubnet and NodeSubnet6 are that network's ranges, the nodes'
	// addresses: in the test ranges for nodes and pods, 198.19.0.0/16 and
	// 2001:db8:19::/64. NodeSubnet is the first /24 of the engine's address
	// pool (lab/engine's DefaultPool), which the network got before it was
	// named here.
	NodeSubnet  = "198.19.244.0/24"
	NodeSubnet6 = "2001:db8:19::/64"
	// PodSubnet and ServiceSubnet are the cluster's ranges, set by the host
	// patch (networking.podSubnet, networking.serviceSubnet) and, for
	// svcproxy's cluster-cidr, by the overlay (lab/kind/overlay). They are
	// the kubeadm cluster's (lab/cluster) too.
	PodSubnet     = "198.19.64.0/18"
	ServiceSubnet = "198.18.0.0/16"
)

// HostPatch is this lab's settings for kind's cluster, the test address
// ranges and this machine's needs, kept apart from
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
	// archive; Kustomization lab/kind/overlay, deploy/kind with the pod range
	// of the host patch.
	ClusterConfig, SvcproxyImage, Kustomization string
	// InotifyWait is how long Up waits for enough inotify instances; 0 is
	// InotifyWait.
	InotifyWait time.Duration
	Log         io.Writer
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
	if cfg.InotifyWait == 0 {
		cfg.InotifyWait = InotifyWait
	}
	if cfg.EngineName == "" {
		cfg.EngineName = EngineName
	}
	if cfg.ClusterConfig == "" {
		cfg.ClusterConfig = "deploy/kind/cluster.yaml"
	}
	if cfg.Kustomization == "" {
		cfg.Kustomization = "lab/kind/overlay"
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
	nodes, err := nodeCount(c.cfg.ClusterConfig)
	if err != nil {
		return fmt.Errorf("kind: %w", err)
	}
	if err := waitInotify(ctx, InotifyInstances(nodes), c.cfg.InotifyWait, 5*time.Second, InotifyFree, c.cfg.Log); err != nil {
		return fmt.Errorf("kind: %d nodes: %w", nodes, err)
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
	if err := step("docker network create "+NetworkName+" ("+NodeSubnet+", "+NodeSubnet6+")", func() error {
		return c.createNetwork(ctx)
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
		if err := c.waitNodes(ctx, nodes, 3*time.Minute); err != nil {
			return err
		}
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

// createNetwork makes the docker network kind would make (kind v0.33.0's
// createNetwork in pkg/cluster/internal/providers/docker/network.go: a
// bridge with IP masquerade, IPv4 and IPv6), with the test ranges as its
// subnets instead of the engine's next free /24 and an IPv6 range kind
// derives from the network's name in fc00::/8. kind finds it by name and
// uses it as it is.
func (c *Cluster) createNetwork(ctx context.Context) error {
	_, err := c.Engine.Docker(ctx, nil, "network", "create", "--driver=bridge",
		"--opt", "com.docker.network.bridge.enable_ip_masquerade=true",
		"--subnet", NodeSubnet, "--ipv6", "--subnet", NodeSubnet6, NetworkName)
	return err
}

// nodeCount is the number of nodes a kind Cluster configuration asks for:
// its nodes, or kind's one control-plane node when it names none.
func nodeCount(config string) (int, error) {
	b, err := os.ReadFile(config)
	if err != nil {
		return 0, err
	}
	var c struct{ Nodes []any }
	if err := yaml.Unmarshal(b, &c); err != nil {
		return 0, fmt.Errorf("%s: %w", config, err)
	}
	return max(len(c.Nodes), 1), nil
}

// waitNodes waits until the API server has want Node objects. `kind create
// cluster` returns once kubeadm join has ended on every worker; a worker's
// kubelet may register its Node a moment later (on a loaded machine, after
// `kubectl wait nodes --all` has already seen the others Ready), and a node
// left out would miss svcproxy's pod and Check's client.
func (c *Cluster) waitNodes(ctx context.Context, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, err := c.Kubectl(ctx, nil, "get", "nodes", "-o", "name")
		have := len(strings.Fields(out))
		if err == nil && have >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d nodes registered after %s (%v):\n%s%s", have, want, timeout, err, out, c.kubeletLogs(ctx))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// kubeletLogs is the last lines of the kubelet's journal on every node
// container, for an error.
func (c *Cluster) kubeletLogs(ctx context.Context) string {
	names, err := c.Engine.Docker(ctx, nil, "ps", "--format", "{{.Names}}")
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, n := range strings.Fields(names) {
		out, err := c.Engine.Docker(ctx, nil, "exec", n, "journalctl", "-u", "kubelet", "--no-pager", "-n", "15")
		fmt.Fprintf(&b, "$ docker exec %s journalctl -u kubelet -n 15\n%s", n, out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	return b.String()
}

// InotifyInstances is about how many inotify instances a kind cluster of
// nodes nodes holds, measured here on a three-node cluster with svcproxy and
// clusterdns (49): on each node its kubelet 7, its systemd 4 and its
// containerd 1, and on the control plane kube-apiserver 6 and
// kube-controller-manager 7.
func InotifyInstances(nodes int) int { return 12*nodes + 13 }

// InotifyWait is how long Up waits for enough inotify instances before it
// says why it cannot start: long enough for another cluster's short stay
// (TestKindSmoke's, about 3 minutes), short of a cluster kept up.
const InotifyWait = 10 * time.Minute

// waitInotify waits, up to timeout, until free says want more inotify
// instances may be made, polling every poll and saying once in log that
// it waits. The limit, fs.inotify.max_user_instances (128 by default),
// counts every instance of the user's processes, and every process of a
// kind node runs as the machine's root: beside another cluster or a lab's
// kubelets, a node's kubelet fails to start ("inotify_init: too many open
// files") and its Node never registers. When time runs out the error says
// why, and what would help.
func waitInotify(ctx context.Context, want int, timeout, poll time.Duration, free func() (int, int, error), log io.Writer) error {
	deadline := time.Now().Add(timeout)
	for first := true; ; first = false {
		n, limit, err := free()
		if err != nil || n >= want {
			return err
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("about %d inotify instances needed, %d of fs.inotify.max_user_instances (%d) free after %s: "+
				"other kubelets or kind clusters hold the rest; take one down, or raise the limit on a machine of "+
				"your own (this lab changes no sysctl of the machine)", want, n, limit, timeout)
		}
		if first {
			fmt.Fprintf(log, "kind: about %d inotify instances needed, %d of %d free: waiting up to %s for another cluster to go\n",
				want, n, limit, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// InotifyFree is how many more inotify instances this user's processes may
// make: fs.inotify.max_user_instances less the instances open in processes
// of this user, counted by their descriptors in /proc (an instance that
// several processes share is counted once per process, which errs towards
// too few).
func InotifyFree() (free, limit int, err error) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		return 0, 0, err
	}
	if limit, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return 0, 0, fmt.Errorf("fs.inotify.max_user_instances: %w", err)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, err
	}
	uid := uint32(os.Getuid())
	used := 0
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+p.Name(), &st) != nil || st.Uid != uid {
			continue
		}
		dir := "/proc/" + p.Name() + "/fd"
		fds, _ := os.ReadDir(dir) // gone, or not ours to read
		for _, fd := range fds {
			if l, _ := os.Readlink(dir + "/" + fd.Name()); l == "anon_inode:inotify" {
				used++
			}
		}
	}
	return max(limit-used, 0), limit, nil
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
// containerdConfigPatches to those of a kind Cluster configuration, and sets
// the keys of its networking there (podSubnet, serviceSubnet), keeping the
// cluster's others (kubeProxyMode); the patch may set nothing else.
func MergeHostPatch(cluster, patch []byte) ([]byte, error) {
	var c, p map[string]any
	if err := yaml.Unmarshal(cluster, &c); err != nil {
		return nil, fmt.Errorf("cluster configuration: %w", err)
	}
	if err := yaml.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("host patch: %w", err)
	}
	for k, v := range p {
		if k == "networking" {
			set, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("host patch: networking: not a mapping")
			}
			have, _ := c[k].(map[string]any)
			if have == nil {
				have = map[string]any{}
			}
			for nk, nv := range set {
				have[nk] = nv
			}
			c[k] = have
			continue
		}
		if k != "kubeadmConfigPatches" && k != "containerdConfigPatches" {
			return nil, fmt.Errorf("host patch: %s: only networking, kubeadmConfigPatches and containerdConfigPatches are merged", k)
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
