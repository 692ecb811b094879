// Package iptables is svcproxy's boundary to netfilter: the iptables rules that bring a
// packet sent to a Service's virtual IP to the userspace proxy (REDIRECT) or straight to
// a pod (DNAT).
//
// Callers render a whole rule set as iptables-restore text and apply it once:
//
//	rules := render(ports)            // pure, golden-tested
//	err := ipt.Restore(ctx, rules)    // one `iptables-restore --noflush` run
//
// and hook their own chains into the built-in ones with EnsureRule.
//
// One Interface is one IP family: Real runs iptables or ip6tables (Config.Family), and
// NewFakeFamily(IPv6) is a Fake of ip6tables, which refuses IPv4 addresses and masks and
// prints ip6tables' defaults (REJECT --reject-with icmp6-port-unreachable). A dual-stack
// node has one of each; their rules never see the other family's packets.
//
// Real runs the iptables binaries. Like every program, they act on the network namespace
// of the process (precisely: of the OS thread that starts them), so svcproxy is started
// inside the namespace it serves; tests call Real from netnstest's NS.Do, whose locked
// thread is in the test's namespace, and the child processes inherit it.
//
// Fake keeps tables, chains and rules in memory with the same transaction rules as
// iptables-restore, rejects what the kernel would reject, prints itself in iptables-save
// form (Dump), and traces a packet through its rules (Trace): which rules it meets, where
// it is sent, whether it is masqueraded. The trace is written to be read by people:
//
//	nat/PREROUTING    -j SVCP-PORTALS
//	nat/SVCP-PORTALS  -d 198.18.0.10/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 40123  => REDIRECT :40123
//
// ParseSave reads iptables-save output back (with -c, each rule's packet counter too):
// each line's table and chain, each rule's target and options, as the lab shows and
// counts the rules a kernel holds.
package iptables
