// Package views shows the node's kernel state as svcproxy left it: its
// rules, a packet traced through them, the conntrack entries, the
// counters, and the socket LB's maps.
//
// Nothing here parses the kernel's output by hand: iptables-save's lines
// are read back by kernel/iptables (ParseSave), nft's table by
// kernel/nftables (ParseListing, the rules' text being what its tracer
// walks), its named counters are read over netlink by kernel/nftables
// (ListCounters, through google/nftables),
// conntrack(8)'s entries are read by kernel/conntrack (ParseList), the
// virtual server a trace meets is read from IPVS by kernel/ipvs (netlink,
// from a thread in the node's namespace), and the socket LB's maps are
// decoded by kernel/socklb (OpenPinned). `svclab rules` shows ipvsadm's
// own listing, the one students meet on a real node. What
// views add is the reading: a legend naming each hashed chain by its
// service port (`svclab rules`), the lines of one Service, and in `svclab
// trace` one walk written once over both tracers (a ruleSet: nftables'
// table first, whose nat chains run before iptables', then iptables'
// rules), every way the random choices can go, and what the pod will see.
//
// Views read the node through a topology.Net (commands run in the node's
// namespace) and a Source for what is not the kernel's: the Services
// svcproxy serves and its /status. `svclab web` draws the same data
// (ServicesView, TraceReport).
package views
