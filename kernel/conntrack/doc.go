// Package conntrack is svcproxy's boundary to the kernel's connection tracking table.
//
// A UDP "connection" through a Service is a conntrack entry that remembers the DNAT
// decision: as long as the client keeps sending, its packets follow the entry, not the
// rules. When the endpoint goes away the entry still points at it and the client is
// blackholed (kubernetes/kubernetes#19029, kubernetes/kubernetes#48370), so the dataplane deletes such entries when
// it removes an endpoint or when a Service gets its first endpoints (a Filter), and
// after a full sync reconciles the whole table with what it serves (Stale): an entry
// to a Service's frontend whose reply does not come from one of its endpoints goes.
//
// Netlink talks to the kernel's conntrack table over netlink (github.com/vishvananda/
// netlink), in the network namespace of the calling thread, as kube-proxy does since it
// stopped running conntrack(8). Fake keeps flows in memory.
//
// ParseList reads conntrack(8)'s listing (`conntrack -L`) back into Entries: what the
// lab shows of a node's table.
package conntrack
