package cluster

import (
	"bytes"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// services parses the v1 Services of a multi-document manifests file.
func services(t *testing.T, manifests []byte) map[string]corev1.Service {
	t.Helper()
	out := map[string]corev1.Service{}
	for _, doc := range bytes.Split(manifests, []byte("\n---\n")) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind != "Service" {
			continue
		}
		var s corev1.Service
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			t.Fatal(err)
		}
		out[s.Namespace+"/"+s.Name] = s
	}
	return out
}

// TestClusterServices checks the control-plane lab has the file-fed lab's
// Services, field for field, so that tutorials hold on both. kube-dns is the
// exception: the control-plane lab gets it from deploy/lab.
func TestClusterServices(t *testing.T) {
	file := services(t, Manifests)
	delete(file, "kube-system/kube-dns")
	objects := services(t, Objects)
	if len(file) == 0 || !reflect.DeepEqual(file, objects) {
		t.Errorf("the Services of cluster.yaml and manifests.yaml differ:\nmanifests.yaml: %v\ncluster.yaml:   %v", keys(file), keys(objects))
	}
}

func keys(m map[string]corev1.Service) string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return strings.Join(k, " ")
}

// loadManifests builds the Snapshot that svcproxy and clusterdns see.
func loadManifests(t *testing.T) *service.Snapshot {
	t.Helper()
	objs, err := watch.LoadManifests("manifests.yaml", Manifests)
	require.NoError(t, err)
	var svcs []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			svcs = append(svcs, o)
		case *discoveryv1.EndpointSlice:
			slices = append(slices, o)
		default:
			t.Fatalf("manifests.yaml: unexpected %T", o)
		}
	}
	snap := service.Build(svcs, slices, nil)
	require.Empty(t, snap.Errors())
	return snap
}

// The manifests and the plan describe one cluster: every endpoint is a lab
// host that serves the endpoint's port, and every address is in its range.
func TestManifestsMatchPlan(t *testing.T) {
	p := topology.DefaultPlan()
	snap := loadManifests(t)
	hosts := map[netip.Addr]topology.Host{}
	for _, h := range append([]topology.Host{p.Node}, p.Hosts...) {
		hosts[h.Addr], hosts[h.Addr6] = h, h
	}
	for _, port := range snap.Ports() {
		for _, ip := range port.Service.ClusterIPs {
			require.True(t, p.ServiceCIDR.Contains(ip) || p.ServiceCIDR6.Contains(ip), "%s: ClusterIP %s outside %s and %s", port, ip, p.ServiceCIDR, p.ServiceCIDR6)
			require.True(t, ip.Is4() || ip == p.IPv6Of(port.Service.ClusterIPs[0]), "%s: IPv6 ClusterIP %s does not mirror %s", port, ip, port.Service.ClusterIPs[0])
		}
		require.NotEmpty(t, port.Endpoints, "%s: no endpoints", port)
		for _, ep := range port.Endpoints {
			h, ok := hosts[ep.Addr.Addr()]
			require.True(t, ok, "%s: endpoint %s is no lab host", port, ep)
			if h.Role == topology.RoleNode {
				continue // clusterdns
			}
			served := h.TCP
			if port.Protocol == service.UDP {
				served = h.UDP
			}
			require.Contains(t, served, ep.Addr.Port(), "%s: %s does not serve %s/%s", port, h.Name, ep.Addr, port.Protocol)
		}
	}
}

// The demo and the tutorial rely on these.
func TestManifestsServices(t *testing.T) {
	snap := loadManifests(t)
	want := map[string]string{
		"default/web":          "ClusterIP 198.18.0.20",
		"default/web-sticky":   "ClusterIP 198.18.0.21",
		"default/web-nodeport": "NodePort 198.18.0.22",
		"default/web-local":    "LoadBalancer 198.18.0.23",
		"default/echo":         "ClusterIP 198.18.0.30",
		"default/web-dual":     "NodePort 198.18.0.24 2001:db8:18::24",
		"default/db":           "ClusterIP headless",
		"default/frontend":     "ExternalName web.default.svc.cluster.local",
		"kube-system/kube-dns": "ClusterIP " + topology.DefaultPlan().DNS.String(),
	}
	got := map[string]string{}
	for _, s := range snap.Services() {
		v := string(s.Type)
		switch {
		case s.Headless:
			v += " headless"
		case s.ExternalName != "":
			v += " " + s.ExternalName
		default:
			for _, ip := range s.ClusterIPs {
				v += " " + ip.String()
			}
		}
		got[s.NamespacedName.String()] = v
	}
	require.Equal(t, want, got)
	sticky, ok := snap.Service(service.NamespacedName{Namespace: "default", Name: "web-sticky"})
	require.True(t, ok)
	require.True(t, sticky.Affinity.ClientIP)
}
