package views

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"text/tabwriter"

	kconntrack "github.com/svcproxy/svcproxy/kernel/conntrack"

	"github.com/svcproxy/svcproxy/service"
)

// ConntrackOptions are the arguments of `svclab conntrack [SERVICE]`.
type ConntrackOptions struct {
	// Service narrows the entries to one Service's ("web",
	// "kube-system/kube-dns"): those to its addresses, and in userspace mode
	// svcproxy's own connections to its endpoints. "": every entry of the
	// lab's addresses.
	Service string
	// Flush deletes every entry of the node's conntrack table instead, so
	// that what is sent next is all there is to see.
	Flush bool
}

// ConntrackView is the node's conntrack entries of the lab's traffic,
// explained: what `svclab conntrack` prints, as data for `svclab web`.
type ConntrackView struct {
	// Service is the Service's one-line description when the entries are
	// one Service's, "" for all of the lab's.
	Service string `json:"service,omitempty"`
	Mode    string `json:"mode"`
	// Entries are newest first.
	Entries []ConntrackEntry `json:"entries"`
}

// ConntrackEntry is one connection as the kernel tracks it.
type ConntrackEntry struct {
	Proto string    `json:"proto"`
	State string    `json:"state"` // "TIME_WAIT"; "-" for UDP
	Sent  [2]string `json:"sent"`  // source, destination of what the opener sent
	Reply [2]string `json:"reply"` // source, destination of the reply the kernel expects
	// Timeout is how many seconds the kernel keeps the entry.
	Timeout int `json:"timeout"`
	// Means says what the difference between Sent and Reply means.
	Means string `json:"means"`
}

// Conntrack writes the node's conntrack entries, explained: what the client
// sent, what the kernel expects back, and what that means (DNAT to a pod, a
// REDIRECT to svcproxy, svcproxy's own connection to a pod, a masquerade).
func (v *Views) Conntrack(ctx context.Context, opts ConntrackOptions) error {
	w := v.stdout
	if opts.Flush {
		if _, err := v.net.NodeOutput(ctx, "conntrack", "-F"); err != nil {
			return err
		}
		fmt.Fprintln(w, "the node's conntrack table is empty")
		return nil
	}
	cv, err := v.ConntrackReport(ctx, opts)
	if err != nil {
		return err
	}
	if cv.Service != "" {
		fmt.Fprintf(w, "# %s\n", cv.Service)
	}
	entries := fmt.Sprintf("%d entries", len(cv.Entries))
	if len(cv.Entries) == 1 {
		entries = "1 entry"
	}
	fmt.Fprintf(w, "# svcproxy runs %s mode; %s, newest first\n\n", cv.Mode, entries)
	if len(cv.Entries) == 0 {
		fmt.Fprintln(w, "(no entries: send some traffic first, svclab traffic or svclab exec client -- curl -s web)")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROTO\tSTATE\tSENT (src -> dst)\tREPLY EXPECTED (src -> dst)\tMEANS")
	for _, e := range cv.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%s -> %s\t%s -> %s\t%s\n", e.Proto, e.State, e.Sent[0], e.Sent[1], e.Reply[0], e.Reply[1], e.Means)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, `
An entry is one connection as the kernel tracks it. Where SENT's destination and
REPLY's source differ, the kernel rewrote the destination (DNAT or REDIRECT) and
rewrites every packet of the connection the same way; where SENT's source and
REPLY's destination differ, it rewrote the source too (MASQUERADE).`)
	return nil
}

// ConntrackReport reads the node's conntrack entries of the lab's traffic
// (opts.Service's only, when set), newest first, each explained.
func (v *Views) ConntrackReport(ctx context.Context, opts ConntrackOptions) (*ConntrackView, error) {
	snap, err := v.src.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var svc *service.Service
	if opts.Service != "" {
		if svc, err = FindService(snap, opts.Service); err != nil {
			return nil, err
		}
	}
	out, err := v.net.NodeOutput(ctx, "conntrack", "-L")
	if err != nil {
		return nil, err
	}
	local, err := v.nodeAddrs(ctx)
	if err != nil {
		return nil, err
	}
	mode, _ := v.net.Mode()
	// In socklb mode a pod's connection to a Service is one to the pod
	// itself: keep the entries to an endpoint from any lab host.
	direct := mode == "socklb"
	flows := relevant(kconntrack.ParseList(out), snap, svc, local, direct)
	// Newest first: of two entries in one state, the newer has more time left.
	sort.SliceStable(flows, func(i, j int) bool { return flows[i].Timeout > flows[j].Timeout })
	cv := &ConntrackView{Mode: mode, Entries: []ConntrackEntry{}}
	if svc != nil {
		cv.Service = describeService(svc)
	}
	for _, f := range flows {
		state := f.State
		if state == "" {
			state = "-"
		}
		cv.Entries = append(cv.Entries, ConntrackEntry{Proto: f.Protocol, State: state, Timeout: f.Timeout,
			Sent:  [2]string{f.Orig[0].String(), f.Orig[1].String()},
			Reply: [2]string{f.Reply[0].String(), f.Reply[1].String()},
			Means: v.means(f, snap, local, direct)})
	}
	return cv, nil
}

// relevant keeps the entries of the lab's traffic: to a Service's addresses
// (svc's, or any when svc is nil) and, for the userspace proxy's second
// connections, from the node to an endpoint; with direct (socklb mode),
// from any host to an endpoint, where the socket LB connects sockets.
func relevant(flows []kconntrack.Entry, snap *service.Snapshot, svc *service.Service, local []netip.Addr, direct bool) []kconntrack.Entry {
	isLocal := map[netip.Addr]bool{}
	for _, a := range local {
		isLocal[a] = true
	}
	var out []kconntrack.Entry
	for _, f := range flows {
		if f.Orig[0].Addr().IsLoopback() || f.Orig[1].Addr().IsLoopback() {
			continue // svclab's own questions to svcproxy's /healthz and /metrics
		}
		p := portOf(f, snap, svc, isLocal, direct)
		switch {
		case p == nil:
			continue
		case svc != nil && p.Service != svc:
			continue
		}
		out = append(out, f)
	}
	return out
}

// portOf finds the service port an entry belongs to: by its destination
// (ClusterIP or NodePort), or, for a connection the node opened to an
// endpoint (userspace mode), or with direct any host's connection to one
// (socklb mode), by the endpoint.
// An endpoint may serve several Services (web's pods serve web-sticky too):
// prefer's ports are looked at first.
func portOf(f kconntrack.Entry, snap *service.Snapshot, prefer *service.Service, isLocal map[netip.Addr]bool, direct bool) *service.Port {
	proto := service.Protocol(strings.ToUpper(f.Protocol))
	if p, ok := snap.PortByVIP(service.VIP{Protocol: proto, Addr: f.Orig[1]}); ok {
		return p
	}
	for _, p := range snap.Ports() {
		if p.Protocol == proto && p.NodePort == f.Orig[1].Port() && isLocal[f.Orig[1].Addr()] {
			return p
		}
	}
	if isLocal[f.Orig[0].Addr()] || direct {
		ports := snap.Ports()
		if prefer != nil {
			ports = append(append([]*service.Port{}, prefer.Ports...), ports...)
		}
		for _, p := range ports {
			for _, ep := range p.Endpoints {
				if p.Protocol == proto && ep.Addr == f.Orig[1] {
					return p
				}
			}
		}
	}
	return nil
}

// means explains one entry; direct is relevant's.
func (v *Views) means(f kconntrack.Entry, snap *service.Snapshot, isLocal []netip.Addr, direct bool) string {
	local := map[netip.Addr]bool{}
	for _, a := range isLocal {
		local[a] = true
	}
	sentTo, replyFrom := f.Orig[1], f.Reply[0]
	masq := f.Reply[1] != f.Orig[0]
	var s string
	switch {
	case sentTo == replyFrom && local[f.Orig[0].Addr()]:
		s = "svcproxy's own connection to " + v.net.WithName(sentTo.Addr()) + " (userspace: the second connection)"
	case sentTo == replyFrom && direct:
		s = "no rewrite: sent to " + v.net.WithName(sentTo.Addr()) + " itself (socklb: connect() was rewritten in the socket)"
	case sentTo == replyFrom:
		s = "no rewrite"
	case local[replyFrom.Addr()] && replyFrom.Port() != sentTo.Port():
		s = fmt.Sprintf("REDIRECT to svcproxy's listener :%d (userspace: the first connection)", replyFrom.Port())
	default:
		s = "DNAT to " + v.net.WithName(replyFrom.Addr())
	}
	if masq && sentTo != replyFrom {
		s += ", MASQUERADE: the pod saw " + v.net.WithName(f.Reply[1].Addr())
	}
	return s
}
