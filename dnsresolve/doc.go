// Package dnsresolve is svcproxy's cluster DNS: it answers
// <service>.<namespace>.svc.<zone> from the same service.Snapshots the proxy
// reads, and forwards every other name to upstream resolvers.
//
// It follows the Kubernetes DNS-Based Service Discovery specification v1.1.0
// (github.com/kubernetes/dns, docs/specification.md) in three layers:
//
//   - Index, a pure lookup layer: built once per Snapshot (no per-query scan),
//     it maps a question (name, type) to the records of the specification:
//     A/AAAA, SRV, PTR, CNAME for ExternalName, the dns-version TXT, and the
//     zone's SOA in NXDOMAIN and NODATA answers.
//   - Forwarder: names outside the zone go to upstreams over UDP (TCP when the
//     answer is truncated), one after another until one answers; a small cache
//     keeps their answers for as long as their TTLs say. It refuses to forward
//     to itself: the /etc/resolv.conf of a pod or host often names 127.0.0.53 or
//     the DNS server's own address (CoreDNS grew its loop plugin for this).
//   - Server: the github.com/miekg/dns server on UDP and TCP. It swaps in a new
//     Index atomically on every Snapshot, honours EDNS0 buffer sizes, truncates
//     (TC) what does not fit, and serves /metrics and /healthz.
package dnsresolve
