package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/svcproxy/svcproxy/internal/k8sbin"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// ControlPlane are the programs of the control-plane lab.
type ControlPlane struct {
	Etcd, APIServer, ControllerManager, Kubectl string
}

// FindControlPlane returns the control-plane programs: those in dir (named
// etcd, kube-apiserver, kube-controller-manager, kubectl), or, when dir is "",
// those `make kapi` built and cached for the svcproxy repository around the
// working directory. It builds nothing: a cold build takes minutes.
func FindControlPlane(dir string) (ControlPlane, error) {
	if dir != "" {
		cp := ControlPlane{
			Etcd:              filepath.Join(dir, "etcd"),
			APIServer:         filepath.Join(dir, "kube-apiserver"),
			ControllerManager: filepath.Join(dir, "kube-controller-manager"),
			Kubectl:           filepath.Join(dir, "kubectl"),
		}
		for _, p := range []string{cp.Etcd, cp.APIServer, cp.ControllerManager, cp.Kubectl} {
			if _, err := os.Stat(p); err != nil {
				return ControlPlane{}, fmt.Errorf("control plane: %w", err)
			}
		}
		return cp, nil
	}
	bins, err := k8sbin.Build(context.Background(), k8sbin.Config{CachedOnly: true, ControlPlane: true})
	if err != nil {
		return ControlPlane{}, fmt.Errorf("control plane: %w; build them with `make kapi` (minutes, once per machine)", err)
	}
	return ControlPlane{Etcd: bins.Etcd, APIServer: bins.APIServer, ControllerManager: bins.ControllerManager, Kubectl: bins.Kubectl}, nil
}

// Where the control plane listens, all inside the node's namespace: etcd on
// its loopback only, kube-apiserver on every node address (pods reach it as
// the Service kubernetes, 198.18.0.1:443, as in a cluster).
const (
	etcdClientURL = "http://127.0.0.1:2379"
	etcdPeerURL   = "http://127.0.0.1:2380"
	apiserverPort = 6443
	// apiserverURL is how the node's own processes reach it.
	apiserverURL = "https://127.0.0.1:6443"
	kcmAddr      = "127.0.0.1:10257"
)

// ControlPlaneTimeout bounds the start of each program: kube-apiserver takes
// seconds on an idle machine, and much longer on a busy one.
const ControlPlaneTimeout = 2 * time.Minute

// startControlPlane writes the PKI, then starts etcd, kube-apiserver and
// kube-controller-manager in the node, each once the one before answers.
// realNode adds the controllers a real kubelet's pods need.
func (c *Cluster) startControlPlane(ctx context.Context, cp ControlPlane, realNode bool) error {
	pk, err := makePKI(c.net.Plan(), c.net.StateDir(), c.Nodes())
	if err != nil {
		return err
	}
	node := c.net.Plan().Node.Name
	etcd, _, err := c.net.Start("etcd", node, append([]string{cp.Etcd}, etcdArgs(c.net.StateDir())...), false)
	if err != nil {
		return err
	}
	plain := nodeHTTP(c.net)
	if err := c.net.Wait(ctx, "etcd", etcd.Process.Pid, ControlPlaneTimeout, 200*time.Millisecond, httpOK(plain, etcdClientURL+"/health", "")); err != nil {
		return err
	}
	apiserver, _, err := c.net.Start("kube-apiserver", node, append([]string{cp.APIServer}, apiserverArgs(c.net.Plan(), c.net.StateDir(), pk)...), false)
	if err != nil {
		return err
	}
	secure := nodeHTTPS(c.net, pk.caPEM)
	if err := c.net.Wait(ctx, "kube-apiserver", apiserver.Process.Pid, ControlPlaneTimeout, 200*time.Millisecond, httpOK(secure, apiserverURL+"/readyz", pk.adminToken)); err != nil {
		return err
	}
	kcm, _, err := c.net.Start("kube-controller-manager", node, append([]string{cp.ControllerManager}, controllerManagerArgs(c.net.StateDir(), pk, realNode)...), false)
	if err != nil {
		return err
	}
	insecure := nodeHTTPSInsecure(c.net)
	return c.net.Wait(ctx, "kube-controller-manager", kcm.Process.Pid, ControlPlaneTimeout, 200*time.Millisecond, httpOK(insecure, "https://"+kcmAddr+"/healthz", ""))
}

// makePKI writes the control plane's keys and certificates in stateDir, a
// kubelet token for each of nodes, and the administrator's kubeconfig.
func makePKI(p *topology.Plan, stateDir string, nodes []*Node) (*pki, error) {
	ips := []net.IP{net.IPv4(127, 0, 0, 1), p.Node.Addr.AsSlice(), p.ServiceCIDR.Addr().Next().AsSlice()}
	if p.DualStack() {
		ips = append(ips, p.Node.Addr6.AsSlice())
	}
	names := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	var kubelets []string
	for _, n := range nodes {
		kubelets = append(kubelets, n.Name)
	}
	pk, err := writePKI(pkiDir(stateDir), ips, names, kubelets)
	if err != nil {
		return nil, fmt.Errorf("control plane pki: %w", err)
	}
	return pk, writeKubeconfig(kubeconfigPath(stateDir, "admin"), apiserverURL, pk.caPEM, adminUser, pk.adminToken)
}

// etcdArgs are etcd's flags: one member, on the node's loopback, its data
// in stateDir.
func etcdArgs(stateDir string) []string {
	return []string{
		"--name=svclab",
		"--data-dir=" + filepath.Join(stateDir, "etcd"),
		"--listen-client-urls=" + etcdClientURL,
		"--advertise-client-urls=" + etcdClientURL,
		"--listen-peer-urls=" + etcdPeerURL,
		"--initial-advertise-peer-urls=" + etcdPeerURL,
		"--initial-cluster=svclab=" + etcdPeerURL,
		// The lab's data need not survive a power cut; fsync per write is
		// most of etcd's latency on a shared disk.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
}

// controllerManagerArgs are kube-controller-manager's flags: the
// controllers the lab needs, and with realNode those a real kubelet's pods
// need too.
func controllerManagerArgs(stateDir string, pk *pki, realNode bool) []string {
	admin := kubeconfigPath(stateDir, "admin")
	// What the lab needs: EndpointSlices from Services' selectors, the
	// pods of StatefulSets, Deployments and ReplicaSets, a default
	// ServiceAccount in each namespace (pods need one), namespace
	// deletion, and the garbage collector that deletes what an owner
	// leaves. No node lifecycle controller: no kubelet heartbeats here.
	controllers := "endpointslice,namespace,serviceaccount,statefulset,deployment,replicaset,garbagecollector"
	if realNode {
		// DaemonSets (svcproxy's); the ConfigMap kube-root-ca.crt in every
		// namespace, which the kubelet mounts into each pod with its
		// ServiceAccount token; and node lifecycle, which lifts the taint
		// node.kubernetes.io/not-ready that kube-apiserver puts on a new
		// Node (admission plugin TaintNodesByCondition) once it is Ready.
		// And EndpointSlice mirroring, which copies an Endpoints object
		// without a selector to EndpointSlices, as kind's controller
		// manager does (conformance: EndpointSliceMirroring).
		controllers += ",daemonset,root-ca-cert-publisher,nodelifecycle,endpointslice-mirroring-controller"
	}
	return []string{
		"--kubeconfig=" + admin,
		"--authentication-kubeconfig=" + admin,
		"--authorization-kubeconfig=" + admin,
		"--controllers=" + controllers,
		"--root-ca-file=" + pk.caFile(),
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + portOf(kcmAddr),
		"--cert-dir=" + filepath.Join(stateDir, "kube-controller-manager"),
		"--profiling=false",
	}
}

// apiserverArgs are kube-apiserver's flags; each one that is not a plain path
// says why it is there.
func apiserverArgs(p *topology.Plan, stateDir string, pk *pki) []string {
	return []string{
		"--bind-address=0.0.0.0", // of the node's namespace
		"--secure-port=" + strconv.Itoa(apiserverPort),
		// As kubeadm's API server: kube-proxy's DaemonSet (deploy/kubeadm)
		// is privileged, and would be refused otherwise.
		"--allow-privileged=true",
		// The Service kubernetes gets this address as its endpoint.
		"--advertise-address=" + p.Node.Addr.String(),
		"--etcd-servers=" + etcdClientURL,
		// One range per family, the first family's first: a Service
		// without ipFamilyPolicy gets an IPv4 ClusterIP alone.
		"--service-cluster-ip-range=" + serviceRanges(p),
		"--tls-cert-file=" + pk.servingCert(),
		"--tls-private-key-file=" + pk.servingKey(),
		"--cert-dir=" + filepath.Join(stateDir, "kube-apiserver"),
		"--token-auth-file=" + pk.tokenFile(),
		// As on kubeadm's clusters: kubelets are limited to their own node
		// and pods, everyone else gets what RBAC grants. svcproxy and
		// clusterdns run with their ServiceAccounts' tokens, so deploy/rbac
		// is what they may do.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// kubectl exec and logs go to a kubelet at its node's address; the
		// default order tries the node's name first, which only the
		// machine's resolver would answer (the real node, svclab up --kubelet).
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-key-file=" + pk.serviceAccount(),
		"--service-account-signing-key-file=" + pk.serviceAccount(),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		// On SIGTERM, answer 429 + Retry-After instead of waiting out
		// open watches for the 60s request timeout.
		"--shutdown-send-retry-after=true",
		// A handful of clients: flow control only costs start time.
		"--enable-priority-and-fairness=false",
		"--profiling=false",
	}
}

// serviceRanges is kube-apiserver's --service-cluster-ip-range: the Service
// range of each of the lab's families.
func serviceRanges(p *topology.Plan) string {
	if p.DualStack() {
		return p.ServiceCIDR.String() + "," + p.ServiceCIDR6.String()
	}
	return p.ServiceCIDR.String()
}
