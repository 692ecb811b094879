package kernelsync

import (
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

// The decisions of kube-proxy's traffic policies, one table for both modes.
func TestNewPolicy(t *testing.T) {
	for _, tt := range []struct {
		name                         string
		internalLocal, externalLocal bool
		external                     bool // a NodePort, externalIPs or LoadBalancer IPs
		cluster, local               int
		hasAny                       bool // without cluster endpoints (Categorize gives none for iTP Local, ClusterIP only)
		want                         Policy
	}{
		{name: "ClusterIP, endpoints elsewhere", cluster: 3,
			want: Policy{HasEndpoints: true, UsesClusterChain: true, HasInternal: true, HasExternal: true}},
		{name: "ClusterIP, no endpoints",
			want: Policy{}},
		{name: "NodePort, Cluster policies", external: true, cluster: 3, local: 1,
			want: Policy{ExternallyAccessible: true, HasEndpoints: true, UsesClusterChain: true, HasInternal: true, HasExternal: true, UsesExtChain: true}},
		{name: "NodePort, external Local, a local endpoint", externalLocal: true, external: true, cluster: 3, local: 1,
			want: Policy{ExternallyAccessible: true, HasEndpoints: true, UsesClusterChain: true, UsesLocalChain: true,
				HasInternal: true, ExternalLocal: true, HasExternal: true, UsesExtChain: true}},
		// The external chain stays: pods short-circuit to the cluster chain.
		{name: "NodePort, external Local, no local endpoint", externalLocal: true, external: true, cluster: 3,
			want: Policy{ExternallyAccessible: true, HasEndpoints: true, UsesClusterChain: true, HasInternal: true, ExternalLocal: true, UsesExtChain: true}},
		// externalTrafficPolicy means nothing without external traffic.
		{name: "ClusterIP, external Local", externalLocal: true, cluster: 3, local: 1,
			want: Policy{HasEndpoints: true, UsesClusterChain: true, HasInternal: true, ExternalLocal: true, HasExternal: true}},
		{name: "ClusterIP, internal Local, a local endpoint", internalLocal: true, hasAny: true, local: 1,
			want: Policy{HasEndpoints: true, UsesLocalChain: true, InternalLocal: true, HasInternal: true, HasExternal: true}},
		{name: "ClusterIP, internal Local, no local endpoint", internalLocal: true, hasAny: true,
			want: Policy{HasEndpoints: true, InternalLocal: true, HasExternal: true}},
		{name: "NodePort, internal Local", internalLocal: true, external: true, cluster: 3, local: 1,
			want: Policy{ExternallyAccessible: true, HasEndpoints: true, UsesClusterChain: true, UsesLocalChain: true,
				InternalLocal: true, HasInternal: true, HasExternal: true, UsesExtChain: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			svc := &service.Service{InternalPolicyLocal: tt.internalLocal, ExternalPolicyLocal: tt.externalLocal}
			got := NewPolicy(svc, tt.external, tt.hasAny || tt.cluster > 0, tt.cluster, tt.local)
			if got != tt.want {
				t.Errorf("NewPolicy =\n %+v\nwant\n %+v", got, tt.want)
			}
			wantInternal, wantExternal := "cluster", "cluster"
			if tt.internalLocal {
				wantInternal = "local"
			}
			if tt.externalLocal {
				wantExternal = "local"
			}
			if in, ex := got.Chains("cluster", "local"); in != wantInternal || ex != wantExternal {
				t.Errorf("Chains = %s, %s; want %s, %s", in, ex, wantInternal, wantExternal)
			}
		})
	}
}
