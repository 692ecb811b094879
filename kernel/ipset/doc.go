// Package ipset puts the kernel's IP sets behind a small Interface: named sets of
// addresses (or address,protocol:port pairs) that one iptables rule matches with a
// single hash lookup ("-m set --match-set NAME dst,dst"). This is how IPVS mode keeps
// its masquerade rules constant in number however many services there are: the
// services go into a set, not into rules (kube-proxy's KUBE-CLUSTER-IP).
//
// Like iptables, a change is a script: rendered first (ReplaceScript, DestroyScript),
// applied once by one `ipset restore` run. Real runs the ipset binary, which acts on
// the network namespace of the thread that starts it; Fake keeps sets in memory,
// refuses what ipset refuses, and can mirror its sets into the iptables Fake for
// packet traces.
package ipset
