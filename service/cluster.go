package service

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
)

// Namespaces are the names of a cluster's namespaces, for a DNS server: CoreDNS's
// kubernetes plugin answers a name in a namespace that does not exist with
// NXDOMAIN, and <namespace>.svc.<zone> of one that does with NODATA.
type Namespaces map[string]struct{}

// Has reports whether ns is one of them.
func (n Namespaces) Has(ns string) bool {
	_, ok := n[ns]
	return ok
}

// PodIPs maps a pod's IP to the namespaces of the pods that have it: what
// CoreDNS's "pods verified" checks a pod name against.
type PodIPs map[netip.Addr][]string

// Has reports whether a pod in namespace ns has ip.
func (p PodIPs) Has(ip netip.Addr, ns string) bool {
	for _, n := range p[ip.Unmap()] {
		if n == ns {
			return true
		}
	}
	return false
}

// PodIP is the address CoreDNS's kubernetes plugin knows a pod by: its
// status.podIP (object.ToPod keeps that one, not status.podIPs), and none
// for a pod that has finished (its informer selects status.phase not
// Succeeded, Failed or Unknown).
func PodIP(pod *v1.Pod) (netip.Addr, bool) {
	switch pod.Status.Phase {
	case v1.PodSucceeded, v1.PodFailed, v1.PodUnknown:
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// Namespaces returns the cluster's namespaces as the source last saw them,
// or nil when the source does not follow them (service/watch's
// Config.Namespaces).
func (s *Snapshot) Namespaces() Namespaces { return s.namespaces }

// WithNamespaces records the cluster's namespaces in the Snapshot.
func WithNamespaces(n Namespaces) SnapshotOption { return func(s *Snapshot) { s.namespaces = n } }

// PodIPs returns the pods' addresses as the source last saw them, or nil
// when the source does not follow pods (service/watch's Config.Pods).
func (s *Snapshot) PodIPs() PodIPs { return s.pods }

// WithPodIPs records the pods' addresses in the Snapshot.
func WithPodIPs(p PodIPs) SnapshotOption { return func(s *Snapshot) { s.pods = p } }
