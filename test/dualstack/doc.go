// Package dualstack runs the svcproxy binary on the real kernel, in network
// namespaces with an IPv4 and an IPv6 address on every link, and checks that a
// dual-stack Service works in both families, mode by mode: each ClusterIP
// spreads connections over its family's endpoints and keeps ClientIP affinity,
// the NodePort answers on the node's address of each family, a port without
// endpoints is refused in both, and `svcproxy --cleanup` leaves nothing in
// either family. Hybrid mode also promotes a port in one family and not the
// other. IPVS mode's dual-stack test runs in test/vm's VM.
package dualstack
