package service

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An EndpointSlice's endpoints.kubernetes.io/last-change-trigger-time reaches
// its Service in the Snapshot, one per slice, and each family's view keeps the
// slices of its family; an absent or unparsable annotation is none
// (kube-proxy's getLastChangeTriggerTime).
func TestTriggers(t *testing.T) {
	at := time.Date(2026, 12, 3, 8, 0, 0, 123456789, time.UTC)
	slice := func(name string, typ discoveryv1.AddressType, addr, trigger string) *discoveryv1.EndpointSlice {
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: typ,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
		}
		if trigger != "" {
			es.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: trigger}
		}
		return es
	}
	policy := v1.IPFamilyPolicyPreferDualStack
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: v1.ServiceSpec{
		ClusterIP: "198.18.0.10", ClusterIPs: []string{"198.18.0.10", "2001:db8:18::10"}, IPFamilyPolicy: &policy,
		IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		Ports:      []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}},
	}}
	snap := Build([]*v1.Service{svc}, []*discoveryv1.EndpointSlice{
		slice("web-v4", discoveryv1.AddressTypeIPv4, "198.19.1.10", at.Format(time.RFC3339Nano)),
		slice("web-v6", discoveryv1.AddressTypeIPv6, "2001:db8:19::10", at.Add(time.Second).Format(time.RFC3339Nano)),
		slice("web-none", discoveryv1.AddressTypeIPv4, "198.19.1.11", ""),
		slice("web-bad", discoveryv1.AddressTypeIPv4, "198.19.1.12", "yesterday"),
	}, nil)
	got, ok := snap.Service(NamespacedName{Namespace: "default", Name: "web"})
	if !ok {
		t.Fatalf("no web: %v", snap.Errors())
	}
	want := map[string]Trigger{
		"web-v4": {Slice: "web-v4", Family: IPv4, At: at},
		"web-v6": {Slice: "web-v6", Family: IPv6, At: at.Add(time.Second)},
	}
	if len(got.Triggers) != len(want) {
		t.Fatalf("triggers %+v, want %+v", got.Triggers, want)
	}
	for _, tr := range got.Triggers {
		if w := want[tr.Slice]; w.Family != tr.Family || !w.At.Equal(tr.At) {
			t.Errorf("trigger %+v, want %+v", tr, w)
		}
	}
	for _, f := range Families {
		v, _ := snap.Family(f).Service(got.NamespacedName)
		if len(v.Triggers) != 1 || v.Triggers[0].Family != f {
			t.Errorf("%s view: triggers %+v, want its own slice's only", f, v.Triggers)
		}
	}
}
