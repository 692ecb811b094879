package service

import (
	v1 "k8s.io/api/core/v1"
)

// TaintToBeDeletedByClusterAutoscaler is the taint the cluster autoscaler puts
// on a node it is about to remove. kube-proxy's /healthz answers 503 on such a
// node so that load balancers drain it first (KEP-3836).
const TaintToBeDeletedByClusterAutoscaler = "ToBeDeletedByClusterAutoscaler"

// Node is this node as its Node object describes it: what traffic
// distribution needs (its labels, the zone among them) and what the health
// check needs (whether the node is going away).
type Node struct {
	Name   string
	Labels map[string]string
	// Deleting is true when metadata.deletionTimestamp is set.
	Deleting bool
	// ToBeDeleted is true when the node carries the cluster autoscaler's
	// ToBeDeletedByClusterAutoscaler taint.
	ToBeDeleted bool
}

// ConvertNode converts a Node object, which it does not keep.
func ConvertNode(obj *v1.Node) *Node {
	n := &Node{Name: obj.Name, Deleting: obj.DeletionTimestamp != nil}
	if len(obj.Labels) > 0 {
		n.Labels = make(map[string]string, len(obj.Labels))
		for k, v := range obj.Labels {
			n.Labels[k] = v
		}
	}
	for _, t := range obj.Spec.Taints {
		if t.Key == TaintToBeDeletedByClusterAutoscaler {
			n.ToBeDeleted = true
		}
	}
	return n
}

// Zone is the node's topology.kubernetes.io/zone label: "" for a nil Node
// or one without the label.
func (n *Node) Zone() string {
	if n == nil {
		return ""
	}
	return n.Labels[v1.LabelTopologyZone]
}

// Node returns this node's Node object as the source last saw it, or nil when
// the source has none: no Node watch, or a manifests file without a Node of
// this node's name.
func (s *Snapshot) Node() *Node { return s.node }

// WithNode makes n, this node's Node object, the Snapshot's Node.
func WithNode(n *Node) SnapshotOption { return func(s *Snapshot) { s.node = n } }

// changeCounts are a source's Service and EndpointSlice changes, cumulative.
type changeCounts struct{ services, endpoints uint64 }

// Changes returns how many Service and EndpointSlice changes the source had
// recorded when it built s (service/watch's Watcher.Changes), all of them
// included in s: a proxy that has handed s to its dataplane has taken up that
// many, and the source's counts beyond them are kube-proxy's pending changes
// (kubeproxy_sync_proxy_rules_{service,endpoint}_changes_pending). Zero for a
// Snapshot no source stamped.
func (s *Snapshot) Changes() (services, endpoints uint64) {
	return s.changes.services, s.changes.endpoints
}

// WithChanges records the source's cumulative Service and EndpointSlice
// change counts that the Snapshot includes (Changes).
func WithChanges(services, endpoints uint64) SnapshotOption {
	return func(s *Snapshot) { s.changes = changeCounts{services, endpoints} }
}
