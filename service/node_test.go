package service

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestConvertNode(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name string
		obj  *v1.Node
		want Node
		zone string
	}{
		{"plain", &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, Node{Name: "n1"}, ""},
		{"zone label", &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{v1.LabelTopologyZone: "z1"}}},
			Node{Name: "n1", Labels: map[string]string{v1.LabelTopologyZone: "z1"}}, "z1"},
		{"deleting", &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", DeletionTimestamp: &now}}, Node{Name: "n1", Deleting: true}, ""},
		{"autoscaler taint", &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1.NodeSpec{Taints: []v1.Taint{
			{Key: "other", Effect: v1.TaintEffectNoSchedule},
			{Key: TaintToBeDeletedByClusterAutoscaler, Effect: v1.TaintEffectNoSchedule},
		}}}, Node{Name: "n1", ToBeDeleted: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ConvertNode(tt.obj)
			if got.Name != tt.want.Name || got.Deleting != tt.want.Deleting || got.ToBeDeleted != tt.want.ToBeDeleted ||
				len(got.Labels) != len(tt.want.Labels) || got.Zone() != tt.zone {
				t.Errorf("ConvertNode = %+v (zone %q), want %+v (zone %q)", *got, got.Zone(), tt.want, tt.zone)
			}
		})
	}
	if (*Node)(nil).Zone() != "" {
		t.Error("a nil Node has a zone")
	}
}

func TestSnapshotNodeSurvivesViews(t *testing.T) {
	snap := NewSnapshot(nil, nil)
	if snap.Node() != nil {
		t.Fatal("a new Snapshot has a Node")
	}
	n := &Node{Name: "n1"}
	snap = snap.With(WithNode(n))
	for _, f := range []Family{IPv4, IPv6} {
		if got := snap.Family(f).Node(); got != n {
			t.Errorf("Family(%v).Node() = %v, want the Snapshot's", f, got)
		}
	}
}
