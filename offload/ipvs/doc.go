// Package ipvs is svcproxy's IPVS dataplane: kube-proxy's ipvs mode, reconciled from a
// service.Snapshot.
//
// Every service IP (ClusterIPs, externalIPs, LoadBalancer IPs) is put on a dummy
// interface (svcp-ipvs0, kube-proxy's kube-ipvs0), so the node takes packets to it as
// its own; on the way in, IPVS finds a virtual server for the packet's IP:port with
// one hash lookup and sends it to a real server (an endpoint) chosen by the virtual
// server's scheduler. NodePorts are virtual servers on each node address.
//
// Sync makes IPVS match the Snapshot and removes what is svcproxy's and no longer
// wanted: a virtual server is svcproxy's when its address is on the dummy interface,
// or is a node address with a port in the NodePort range. It is idempotent: a second
// Sync of the same Snapshot changes nothing. A real server that leaves is drained
// rather than cut: it gets weight 0 (no new connections) and is deleted once its
// connections are gone, or after Config.GracePeriod; UDP has no connections to wait
// for and is deleted at once. The UDP conntrack entries a Sync leaves stale (of a
// frontend no longer served, or not leading to one of its real servers) are deleted
// after it (conntrack.go), as kube-proxy's ipvs mode does: a UDP client would keep
// sending into them.
//
// IPVS rewrites destinations only, so traffic from outside the cluster CIDR (and to
// external IPs and NodePorts) is marked and masqueraded by a few nat rules in chains
// of ours (SVCP-IPVS-*), which match ip sets of the service addresses: the rules do
// not grow with the services, the sets do (masq.go, kube-proxy's KUBE-CLUSTER-IP).
// Cleanup removes everything svcproxy made (--cleanup).
//
// A Dataplane serves one IP family (Config.Family). A dual-stack node runs two, as
// kube-proxy does: they share IPVS and the dummy interface, and each adds, retires and
// removes only the virtual servers and addresses of its own family; the IPv6 one
// masquerades with ip6tables over ip sets of family inet6 named SVCP-6-IPVS-*.
package ipvs
