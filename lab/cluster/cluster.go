package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/lab/pods"
	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// Modes svcproxy can run in (its --mode).
var Modes = []string{"userspace", "iptables", "nftables", "ipvs", "socklb", "hybrid"}

// CheckMode says whether mode is one svcproxy takes.
func CheckMode(mode string) error {
	if !slices.Contains(Modes, mode) {
		return fmt.Errorf("mode %q: want one of %s", mode, strings.Join(Modes, ", "))
	}
	return nil
}

// ErrRealNodeSocketLB refuses --mode socklb on the real node, whose pods are
// started by containerd, not born in the lab's subtree.
var ErrRealNodeSocketLB = errors.New("mode socklb: not on the real node: its pods' processes are in the kubelet's cgroups, not in the lab's cgroup2 subtree, and svcproxy's DaemonSet mounts no cgroup2 to attach to")

// Config says what a Cluster runs.
type Config struct {
	// Net is the lab the cluster's nodes and pods are hosts of.
	Net *topology.Net
	// Pods starts the pods' servers (the file-fed lab's, the simulated
	// kubelet's).
	Pods *pods.Runner
	// Self is the svclab binary, which the control-plane lab runs as its
	// kubelet (`svclab kubelet`).
	Self string
	// Manifests are written to the state directory for the file-fed lab's
	// svcproxy and clusterdns.
	Manifests []byte
}

// Cluster is where the lab's Services and pods come from, and what runs
// them: the manifests file, or a control plane with the simulated kubelet
// or real nodes; and the node's svcproxy and clusterdns (Daemons).
type Cluster struct {
	net       *topology.Net
	pods      *pods.Runner
	self      string
	manifests []byte
	daemons   *Daemons
}

// New returns the Cluster of cfg.
func New(cfg Config) *Cluster {
	c := &Cluster{net: cfg.Net, pods: cfg.Pods, self: cfg.Self, manifests: cfg.Manifests}
	c.daemons = &Daemons{c: c, net: cfg.Net}
	return c
}

// Daemons are the node's svcproxy and clusterdns.
func (c *Cluster) Daemons() *Daemons { return c.daemons }

// Status is svcproxy's /status document: each service port's path and
// counters (Daemons.NodeGet).
func (c *Cluster) Status(ctx context.Context) (string, error) {
	return c.daemons.NodeGet(ctx, "/status")
}

// ManifestsPath is the file-fed lab's --services file of svcproxy and
// clusterdns.
func (c *Cluster) ManifestsPath() string { return filepath.Join(c.net.StateDir(), "services.yaml") }

// KubeconfigPath is the kubeconfig of user ("admin", "svcproxy", "clusterdns").
func (c *Cluster) KubeconfigPath(user string) string { return kubeconfigPath(c.net.StateDir(), user) }

// kubeconfigPath is the kubeconfig of user in the state directory.
func kubeconfigPath(stateDir, user string) string {
	return filepath.Join(stateDir, user+".kubeconfig")
}

// pkiDir holds the lab's control plane's keys, in the state directory.
func pkiDir(stateDir string) string { return filepath.Join(stateDir, "pki") }

// HasControlPlane says whether the lab runs a control plane (svclab up
// --control-plane): pods' readiness then goes through the API server.
func (c *Cluster) HasControlPlane() (bool, error) {
	st, err := c.net.ReadState()
	return st.Kubectl != "", err
}

// UpFileFed builds the file-fed lab once the state directory is there: the
// manifests file, the Plan's namespaces, a server in each pod, then
// clusterdns (bin dns) and svcproxy (bin proxy, in mode) in the node, each
// once it answers.
func (c *Cluster) UpFileFed(ctx context.Context, dns, proxy, mode string) error {
	if err := c.net.Build(ctx, func(topology.Host) bool { return true }); err != nil {
		return err
	}
	for _, h := range c.net.Plan().Pods() {
		if err := c.pods.StartServer(ctx, h); err != nil {
			return err
		}
	}
	if err := c.daemons.startDNS(ctx, dns); err != nil {
		return err
	}
	return c.daemons.startProxy(ctx, proxy, mode)
}

// WriteManifests writes the file-fed lab's manifests file.
func (c *Cluster) WriteManifests() error {
	return os.WriteFile(c.ManifestsPath(), c.manifests, 0o644)
}

// Snapshot is what svcproxy serves now: in the control-plane lab, the API
// server's Services and EndpointSlices; otherwise the lab's manifests file as
// it is on disk (a student may have edited it), read as svcproxy reads it.
func (c *Cluster) Snapshot(ctx context.Context) (*service.Snapshot, error) {
	st, err := c.net.ReadState()
	if err != nil {
		return nil, err
	}
	if st.Kubectl != "" {
		kc, err := c.Client()
		if err != nil {
			return nil, err
		}
		svcs, err := kc.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list Services: %w", err)
		}
		slices, err := kc.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list EndpointSlices: %w", err)
		}
		var ss []*v1.Service
		for i := range svcs.Items {
			ss = append(ss, &svcs.Items[i])
		}
		var es []*discoveryv1.EndpointSlice
		for i := range slices.Items {
			es = append(es, &slices.Items[i])
		}
		return service.Build(ss, es, nil), nil
	}
	b, err := os.ReadFile(c.ManifestsPath())
	if err != nil {
		return nil, err
	}
	return watch.SnapshotOf(c.ManifestsPath(), b)
}
