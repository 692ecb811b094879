// Package nftables is svcproxy's boundary to nf_tables: one table of svcproxy's own
// (`ip svcproxy`), written in transactions of nft commands through
// sigs.k8s.io/knftables, the library kube-proxy's nftables mode uses.
//
// Callers render what they want as a transaction, print it if they like, and run it
// once; the kernel applies it atomically:
//
//	tx := nft.NewTransaction()
//	tx.Add(&knftables.Chain{Name: "services"})           // rendered, golden-tested
//	err := nft.Run(ctx, tx)                              // one `nft -f -` run
//
// A large transaction can be made in parts (RunParts): each part is a
// transaction of its own, written to the same `nft -f -` and let go, and
// the kernel still applies them as one.
//
// Real runs the nft binary (Debian's nftables package), which acts on the network
// namespace of the OS thread that starts it, as iptables does: svcproxy runs inside
// the namespace it serves, and tests call Real from netnstest's NS.Do. Two things
// keep it from growing with the table: it hands nft each chain's rules as one
// block, and the elements that follow a set's declaration inside it
// (chainBlocks: then nft need not read every chain of the table first), and it
// lists names over netlink (github.com/google/nftables, through
// knftables), which reads no rules.
//
// Fake keeps the table in memory (knftables.Fake, which validates what it is given and
// prints itself with Dump) and traces a packet through it (Trace): which base chains it
// meets at each hook, in priority order, which verdict map elements and rules send it
// on, where it is DNATed, whether it is masqueraded. Verdict maps, sets (concatenated
// keys too), dynamic sets with timeouts (ClientIP affinity) and `numgen random` are
// modelled, for the rule
// shapes svcproxy writes. The trace is written to be read:
//
//	nat-prerouting  jump services
//	services        ip daddr . meta l4proto . th dport vmap @service-ips  => 198.18.0.10 . tcp . 80 : goto service-...
//
// ParseListing reads a table as `nft list table` prints it back into a Listing, whose
// Fake holds the same table: how the lab traces a packet through the rules a kernel
// holds now.
package nftables
