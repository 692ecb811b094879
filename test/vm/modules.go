package vm

// IPVSModules are the modules the IPVS tests load, in an order that works on Debian's
// 6.1 kernel. crc32c-intel may fail under TCG; crc32c_generic then serves libcrc32c.
var IPVSModules = []string{
	"crc32c-intel", "crc32c_generic", "libcrc32c",
	"nf_defrag_ipv4", "nf_defrag_ipv6", "nf_conntrack",
	"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_lc", "ip_vs_wlc", "ip_vs_sh", "ip_vs_dh", "ip_vs_sed", "ip_vs_nq",
	"veth", "dummy",
	"x_tables", "nf_nat", "ip_tables", "iptable_nat", "iptable_filter", "xt_MASQUERADE", "xt_mark", "xt_comment",
	"xt_addrtype", "xt_conntrack", "nfnetlink", "nf_conntrack_netlink", "ip_set", "xt_set", "ip_set_hash_ip", "ip_set_hash_ipport",
	"ip_set_hash_ipportip", "ip_set_hash_ipportnet", "ip_set_hash_net", "ip_set_bitmap_port",
	// hybrid mode's userspace portals: -m tcp/-m udp, REDIRECT, and REJECT for ports
	// without endpoints.
	"xt_tcpudp", "xt_REDIRECT", "nf_reject_ipv4", "ipt_REJECT",
	// IPv6: a dual-stack node's second dataplane masquerades and portals with
	// ip6tables (IPv6 itself and IPVS's IPv6 support are built into the kernel).
	"ip6_tables", "ip6table_nat", "ip6table_filter", "nf_reject_ipv6", "ip6t_REJECT",
}
