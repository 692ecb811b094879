package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/views"
)

// nodeUsage is the --node flag of rules, trace and conntrack.
const nodeUsage = "the `NODE` whose kernel to read: on the kubeadm cluster (svclab up --nodes N), worker1 or worker2 (default: node)"

// newFlags is a command's flag set whose -h/--help says what the command
// does, its synopsis, and every flag.
func newFlags(cfg lab.Config, synopsis, about string) *flag.FlagSet {
	name := strings.Fields(synopsis)[0] + " " + strings.Fields(synopsis)[1]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(cfg.Stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "usage: %s\n\n%s\n", synopsis, strings.TrimSpace(about))
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(out, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseAnyOrder parses flags given before, between or after the positional
// arguments (`svclab rules web --counters`), which flag.Parse alone does not,
// and returns the positional arguments.
func parseAnyOrder(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// wantArgs checks the number of positional arguments, between lo and hi.
func wantArgs(fs *flag.FlagSet, pos []string, lo, hi int) error {
	if len(pos) < lo || len(pos) > hi {
		fs.Usage()
		return fmt.Errorf("want %d to %d argument(s), got %d: %s", lo, hi, len(pos), strings.Join(pos, " "))
	}
	return nil
}

const rulesAbout = `
svcproxy's rules as the node's kernel holds them: the iptables chains it made
(iptables-save, lines with SVCP-), then IPv6's in ip6tables, in socklb mode
the socket LB's maps (on the kubeadm cluster the node's own, pinned in its
mount namespace), its nftables tables (nft list table ip svcproxy, then ip6
svcproxy), and the IPVS table (ipvsadm -ln). With SERVICE, the IPv6 parts
only for a Service with an IPv6 address.

Each hashed iptables chain (SVCP-SVC-..., SVCP-SEP-...) is named in a legend by
its service port and endpoint, and rules are listed in the order a packet meets
them. With SERVICE ("web", "kube-system/kube-dns"), only that Service's rules,
and the hooks that lead to them. With --counters, each iptables rule's packet
count (in the nat table: new connections) and IPVS's per-server counters.`

func cmdRules(ctx context.Context, cfg lab.Config, args []string) error {
	fs := newFlags(cfg, "svclab rules [SERVICE] [--counters]", rulesAbout)
	counters := fs.Bool("counters", false, "show the packets each rule matched, and IPVS's connection counters")
	fs.StringVar(&cfg.Node, "node", "", nodeUsage)
	pos, err := parseAnyOrder(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 1); err != nil {
		return err
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	opts := views.RulesOptions{Counters: *counters}
	if len(pos) == 1 {
		opts.Service = pos[0]
	}
	_, err = l.Views().RulesWith(ctx, opts)
	return err
}

const traceAbout = `
Follows the first packet of a new connection from lab host FROM to a Service
through the rules the node's kernel holds now: which chain, which rule, which
DNAT or REDIRECT, masqueraded or not, and what the pod will see as the client's
address. The rules are read from the node (iptables-save, nft list table ip
svcproxy) and walked by the tracers of kernel/iptables and kernel/nftables; no
packet is sent.

FROM is a lab host: client, outside, node, web-0, ...
SERVICE is a Service name ("web", "kube-system/kube-dns"), optionally with a
port name or number ("web:http", "kube-dns:53") and a protocol ("udp://echo"),
or an address and port ("198.19.0.1:30080" for a NodePort).

Where the rules choose an endpoint at random, every way is listed with its
probability; --pick N prints way N in full.`

func cmdTrace(ctx context.Context, cfg lab.Config, args []string) error {
	fs := newFlags(cfg, "svclab trace FROM SERVICE[:PORT] [--pick N]", traceAbout)
	pick := fs.Int("pick", 0, "follow way `N` of the random choices in full (0: the first endpoint)")
	fs.StringVar(&cfg.Node, "node", "", nodeUsage)
	pos, err := parseAnyOrder(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 2, 2); err != nil {
		return err
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	return l.Views().Trace(ctx, views.TraceOptions{From: pos[0], Target: pos[1], Pick: *pick})
}

const conntrackAbout = `
The node's conntrack entries for the lab's Services, newest first, each
explained: what the client sent, the reply the kernel expects, and what that
means. In userspace mode one request is two entries (the client's connection,
REDIRECTed to svcproxy's listener, and svcproxy's own connection to a pod); in
iptables, nftables and IPVS mode it is one, DNATed to the pod.

SERVICE ("web", "kube-system/kube-dns") narrows the list to that Service.
--flush empties the table first, so that what you send next is all there is.`

func cmdConntrack(ctx context.Context, cfg lab.Config, args []string) error {
	fs := newFlags(cfg, "svclab conntrack [SERVICE] [--flush]", conntrackAbout)
	flush := fs.Bool("flush", false, "delete every entry of the node's conntrack table, and show nothing")
	fs.StringVar(&cfg.Node, "node", "", nodeUsage)
	pos, err := parseAnyOrder(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 1); err != nil {
		return err
	}
	l, err := lab.New(cfg)
	if err != nil {
		return err
	}
	opts := views.ConntrackOptions{Flush: *flush}
	if len(pos) == 1 {
		opts.Service = pos[0]
	}
	return l.Views().Conntrack(ctx, opts)
}
