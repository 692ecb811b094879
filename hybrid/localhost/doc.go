// Package localhost is nftables mode with localhost NodePorts (KEP-6032):
// the nftables table serves every address but loopback, and userspace
// listeners on 127.0.0.1 and ::1 serve the TCP NodePorts there, since a DNAT
// from loopback to a pod needs route_localnet, which svcproxy never sets.
// Like hybrid, it composes the userspace proxier with a kernel path, so it
// sits beside hybrid, above the paths: a port's traffic is split by where it
// comes from (loopback or not), not by how busy it is.
package localhost
