package views

// TraceReport is what `svclab trace` found, as data: the hops of the packet
// through the node's rules, in the order the tracers walked them, and where
// it ends. `svclab web` draws it.
type TraceReport struct {
	From  string `json:"from"`  // the lab host that sent the packet
	Src   string `json:"src"`   // its address
	Dst   string `json:"dst"`   // the address and port it was sent to
	Proto string `json:"proto"` // TCP or UDP
	// Port is the service port the destination belongs to, "" for none.
	Port string `json:"port"`
	// Mode is the mode svcproxy runs in.
	Mode string `json:"mode"`
	// InIface is the node's link the packet arrives on; Local says the node
	// sent it itself.
	InIface string `json:"inIface"`
	Local   bool   `json:"local"`
	// Hops are the rules that sent the packet on, one per step of the
	// tracers (nftables, then iptables), and IPVS's virtual server.
	Hops []TraceHop `json:"hops"`
	// Ways are every way the choices on the packet's path can go, with
	// their chances: the rules' random choices, the userspace proxy's or
	// IPVS's endpoints in turn, the socket LB's random slot. --pick N
	// (TraceOptions.Pick) follows way N.
	Ways []TraceWay `json:"ways"`
	// Choice says who chooses among the Ways and how: "random" (the rules),
	// "round-robin" (svcproxy's userspace proxy), "IPVS rr: ...", "random
	// slot" (the socket LB); "" when there is one way.
	Choice string `json:"choice"`
	// Pick is the way the trace followed (TraceOptions.Pick).
	Pick int `json:"pick"`
	// Path is the packet's way drawn: host by host, its addresses after
	// each rewrite, the replies and the conntrack entries.
	Path PacketPath `json:"path"`
	// Result says in words what happens to the connection and what the pod
	// sees.
	Result string `json:"result"`
	// Text is what `svclab trace` prints.
	Text string `json:"text"`
}

// TraceHop is one step of a trace: a rule that matched, a random choice not
// taken, a chain's policy, or IPVS's virtual server.
type TraceHop struct {
	Tracer string `json:"tracer"` // "nftables", "iptables", "IPVS", or "socklb" (the socket LB's program: Table is "cgroup connect4", Chain the map looked up)
	Table  string `json:"table"`  // "nat"; nftables: "ip svcproxy"
	Chain  string `json:"chain"`
	Rule   string `json:"rule"` // as the rule set prints it; "" for a policy
	Note   string `json:"note"` // what the rule did: "DNAT 198.19.1.10:8080"
}

// TraceWay is one way a trace can go: its result and probability.
type TraceWay struct {
	Result string  `json:"result"`
	P      float64 `json:"p"`
}
