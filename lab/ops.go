package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/svcproxy/svcproxy/lab/pods"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// TrafficOptions are the flags of `svclab traffic`.
type TrafficOptions struct {
	Target string
	N      int
	Rate   float64 // requests per second, 0: back to back
	// From is the host that sends; "" is the client.
	From string
	// Timeline adds a table of the answers per second by the path that
	// carried them, userspace or kernel (see Timeline).
	Timeline bool
	// Hold keeps one more connection open from before the first request to
	// after the last, and says whether it survived (Probe.Hold).
	Hold bool
	// IPv6 resolves a name to its IPv6 ClusterIP (AAAA) instead of its IPv4
	// one (Probe.IPv6).
	IPv6 bool
	// OnEvent, when set, is called with each of the probe's events as it
	// arrives (from Traffic's goroutine): what `svclab web` draws its
	// timeline from while the requests run.
	OnEvent func(pods.Event) `json:"-"`
}

// Traffic sends opts.N requests to opts.Target from the client (a Probe run
// as `svclab probe` inside the client's namespace, so it resolves names with
// the client's resolv.conf), shows their progress, then writes a table and a
// bar chart of the answers to Stdout. The Tally is returned for checks.
func (l *Lab) Traffic(ctx context.Context, opts TrafficOptions) (*pods.Tally, error) {
	target, err := pods.ParseTarget(opts.Target)
	if err != nil {
		return nil, err
	}
	if opts.N <= 0 {
		return nil, fmt.Errorf("--n %d: want at least 1", opts.N)
	}
	from := opts.From
	if from == "" {
		from = "client"
	}
	argv := []string{l.cfg.Self, "probe", "--n", fmt.Sprint(opts.N), "--rate", fmt.Sprint(opts.Rate)}
	if opts.Hold {
		if target.Proto != "http" {
			return nil, fmt.Errorf("--hold: target %s: a held connection needs HTTP", opts.Target)
		}
		argv = append(argv, "--hold")
	}
	if opts.IPv6 {
		argv = append(argv, "--ipv6")
	}
	cmd, release, err := l.net.Command(ctx, from, append(argv, opts.Target))
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		release()
		return nil, err
	}
	err = cmd.Start()
	release()
	if err != nil {
		return nil, err
	}
	t := &pods.Tally{Target: opts.Target}
	tl := l.timeline(from, false)
	var lookupErr string
	var held []pods.Event // the held connection's two requests (Hold)
	named := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var ev pods.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		if opts.OnEvent != nil {
			opts.OnEvent(ev)
		}
		if ev.Held != 0 {
			held = append(held, ev)
			continue
		}
		if ev.Seq == 0 && ev.Err != "" {
			lookupErr = ev.Err
		}
		t.Add(ev)
		tl.Add(ev)
		if ev.Addr != "" && !named {
			named = true
			host, _, _ := net.SplitHostPort(ev.Addr)
			if host != target.Host {
				fmt.Fprintf(l.cfg.Stdout, "%s is %s\n", target.Host, host)
			}
			// Which of the sender's and the node's addresses the pods
			// see depends on the family the target resolved to.
			if ip, err := netip.ParseAddr(host); err == nil && ip.Is6() && !ip.Is4In6() {
				tl = l.timeline(from, true)
			}
		}
		if l.cfg.Progress && ev.Seq > 0 {
			fmt.Fprintf(l.cfg.Stdout, "\r%s", pods.Progress(t.Total, opts.N, 40))
		}
	}
	werr := cmd.Wait()
	if lookupErr != "" {
		return t, errors.New(lookupErr)
	}
	if werr != nil {
		return t, fmt.Errorf("probe from %s: %w: %s", from, werr, strings.TrimSpace(stderr.String()))
	}
	if l.cfg.Progress {
		fmt.Fprintln(l.cfg.Stdout)
	} else {
		fmt.Fprintln(l.cfg.Stdout, pods.Progress(t.Total, opts.N, 40))
	}
	fmt.Fprintln(l.cfg.Stdout)
	if err := t.WriteTable(l.cfg.Stdout, l.net.Names()); err != nil {
		return t, err
	}
	fmt.Fprintln(l.cfg.Stdout)
	if err := t.WriteChart(l.cfg.Stdout, 40); err != nil {
		return t, err
	}
	if opts.Timeline {
		fmt.Fprintln(l.cfg.Stdout)
		if err := tl.Write(l.cfg.Stdout); err != nil {
			return t, err
		}
	}
	if opts.Hold {
		fmt.Fprintln(l.cfg.Stdout)
		return t, l.writeHeld(held, tl)
	}
	return t, nil
}

// writeHeld reports the held connection's two requests (TrafficOptions.Hold)
// and fails when the connection did not survive: the second request failed,
// or went over a new connection.
func (l *Lab) writeHeld(held []pods.Event, tl *pods.Timeline) error {
	w := l.cfg.Stdout
	if len(held) != 2 {
		return fmt.Errorf("the held connection: %d of its 2 requests reported", len(held))
	}
	names := l.net.Names()
	path := func(ev pods.Event) string {
		host, _, err := net.SplitHostPort(ev.From)
		ip, perr := netip.ParseAddr(host)
		switch {
		case err != nil || perr != nil:
			return ""
		case ip == tl.Node:
			return ", through userspace (svcproxy's connection)"
		case ip == tl.Sender && !tl.Masqueraded:
			return ", through the kernel"
		}
		if n, ok := names[ip]; ok {
			return " (" + n + ")"
		}
		return ""
	}
	fmt.Fprintln(w, "The held connection, opened before the first request and kept open:")
	for _, ev := range held {
		when := "before"
		if ev.Held == 2 {
			when = fmt.Sprintf("after, at %.1fs", ev.At)
		}
		if ev.Err != "" {
			fmt.Fprintf(w, "  %s: failed: %s\n", when, ev.Err)
			continue
		}
		fmt.Fprintf(w, "  %s: %s answered; it saw %s%s\n", when, ev.Pod, ev.From, path(ev))
	}
	first, last := held[0], held[1]
	switch {
	case first.Err != "" || last.Err != "":
		return errors.New("the held connection failed")
	case !last.Reused:
		return errors.New("the held connection was closed: its second request needed a new connection")
	}
	if first.Pod != last.Pod || first.From != last.From {
		return fmt.Errorf("the held connection reached %s (%s), then %s (%s)", first.Pod, first.From, last.Pod, last.From)
	}
	_, err := fmt.Fprintf(w, "One connection, open all along: the same pod answered, and saw the same address and port.\n")
	return err
}

// timeline is an empty Timeline for requests sent from host from, over
// IPv6 or IPv4.
func (l *Lab) timeline(from string, ipv6 bool) *pods.Timeline {
	p := l.cfg.Plan
	h, _ := l.net.Host(from)
	if ipv6 {
		return &pods.Timeline{
			Sender:      h.Addr6,
			Node:        p.Node.Addr6,
			Masqueraded: h.Role == topology.RolePod || !p.ClusterCIDR6.Contains(h.Addr6),
		}
	}
	return &pods.Timeline{
		Sender:      h.Addr,
		Node:        p.Node.Addr,
		Masqueraded: h.Role == topology.RolePod || !p.ClusterCIDR.Contains(h.Addr),
	}
}

// Rules writes svcproxy's rules as the node's kernel holds them: the lines of
// `iptables-save` that belong to SVCP- chains, svcproxy's nftables table
// (`nft list table ip svcproxy`) when there is one, then the IPVS table of
// `ipvsadm -ln`, or a line saying the kernel has none. It returns what it wrote.
func (l *Lab) Rules(ctx context.Context) (string, error) {
	s, err := l.rules(ctx)
	if err != nil {
		return "", err
	}
	_, err = io.WriteString(l.cfg.Stdout, s)
	return s, err
}

// rules is what Rules writes.
func (l *Lab) rules(ctx context.Context) (string, error) {
	node := l.cfg.Plan.Node.Name
	var save, serr bytes.Buffer
	if err := l.net.Exec(ctx, node, []string{"iptables-save"}, nil, &save, &serr); err != nil {
		return "", fmt.Errorf("iptables-save in the node: %w: %s", err, strings.TrimSpace(serr.String()))
	}
	var b strings.Builder
	b.WriteString(FilterRules(save.String(), "SVCP-"))
	var nft, nerr bytes.Buffer
	if err := l.net.Exec(ctx, node, []string{"nft", "list", "table", "ip", "svcproxy"}, nil, &nft, &nerr); err == nil {
		b.WriteString("\n# nftables (nft list table ip svcproxy)\n")
		b.WriteString(nft.String())
	} else if _, lookErr := exec.LookPath("nft"); lookErr != nil {
		b.WriteString("\n# nftables: not shown, nft is not installed (Debian: apt-get install nftables).\n")
	} else {
		b.WriteString("\n# nftables: no table ip svcproxy (svcproxy runs no nftables path).\n")
	}
	var ipvs, ierr bytes.Buffer
	if err := l.net.Exec(ctx, node, []string{"ipvsadm", "-ln"}, nil, &ipvs, &ierr); err != nil {
		msg := strings.TrimSpace(strings.SplitN(ierr.String()+ipvs.String(), "\n", 2)[0])
		if _, lookErr := exec.LookPath("ipvsadm"); lookErr != nil {
			b.WriteString("\n# IPVS: not shown, ipvsadm is not installed (Debian: apt-get install ipvsadm).\n")
		} else {
			fmt.Fprintf(&b, "\n# IPVS: none. This kernel has no IPVS, so --mode ipvs cannot run here.\n# (ipvsadm -ln: %s)\n", msg)
		}
	} else {
		b.WriteString("\n# IPVS (ipvsadm -ln)\n")
		b.WriteString(ipvs.String())
	}
	return b.String(), nil
}

// FilterRules keeps, from iptables-save output, the lines that mention prefix
// (chain declarations, jumps and rules), each under its table's "*table"
// line; tables without any are left out, and so are comments and counters.
func FilterRules(save, prefix string) string {
	var b strings.Builder
	table, printed := "", false
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table, printed = line, false
		case strings.Contains(line, prefix):
			if !printed {
				if b.Len() > 0 {
					b.WriteString("\n")
				}
				b.WriteString("# table " + strings.TrimPrefix(table, "*") + "\n")
				printed = true
			}
			b.WriteString(line + "\n")
		}
	}
	if b.Len() == 0 {
		return "# no " + prefix + " rules\n"
	}
	return b.String()
}
