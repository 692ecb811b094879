package pods

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
	"strings"

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
	OnEvent func(Event) `json:"-"`
}

// Traffic sends opts.N requests to opts.Target from the client (a Probe run
// as `svclab probe` inside the client's namespace, so it resolves names with
// the client's resolv.conf), shows their progress, then writes a table and a
// bar chart of the answers to Stdout. The Tally is returned for checks.
func (r *Runner) Traffic(ctx context.Context, opts TrafficOptions) (*Tally, error) {
	target, err := ParseTarget(opts.Target)
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
	argv := []string{r.self, "probe", "--n", fmt.Sprint(opts.N), "--rate", fmt.Sprint(opts.Rate)}
	if opts.Hold {
		if target.Proto != "http" {
			return nil, fmt.Errorf("--hold: target %s: a held connection needs HTTP", opts.Target)
		}
		argv = append(argv, "--hold")
	}
	if opts.IPv6 {
		argv = append(argv, "--ipv6")
	}
	cmd, release, err := r.net.Command(ctx, from, append(argv, opts.Target))
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
	run := r.read(out, target, from, opts)
	werr := cmd.Wait()
	if run.lookupErr != "" {
		return run.tally, errors.New(run.lookupErr)
	}
	if werr != nil {
		return run.tally, fmt.Errorf("probe from %s: %w: %s", from, werr, strings.TrimSpace(stderr.String()))
	}
	return run.tally, r.write(run, opts)
}

// trafficRun is what a probe's events said.
type trafficRun struct {
	tally     *Tally
	timeline  *Timeline
	held      []Event // the held connection's two requests (TrafficOptions.Hold)
	lookupErr string  // the target's name did not resolve
}

// read reads the events a probe from host from writes to out, as they
// come: the tally and the timeline of the answers, and the progress bar.
func (r *Runner) read(out io.Reader, target Target, from string, opts TrafficOptions) trafficRun {
	run := trafficRun{tally: &Tally{Target: opts.Target}, timeline: r.timeline(from, false)}
	named := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		if opts.OnEvent != nil {
			opts.OnEvent(ev)
		}
		if ev.Held != 0 {
			run.held = append(run.held, ev)
			continue
		}
		if ev.Seq == 0 && ev.Err != "" {
			run.lookupErr = ev.Err
		}
		run.tally.Add(ev)
		run.timeline.Add(ev)
		if ev.Addr != "" && !named {
			named = true
			host, _, _ := net.SplitHostPort(ev.Addr)
			if host != target.Host {
				fmt.Fprintf(r.stdout, "%s is %s\n", target.Host, host)
			}
			// Which of the sender's and the node's addresses the pods
			// see depends on the family the target resolved to.
			if ip, err := netip.ParseAddr(host); err == nil && ip.Is6() && !ip.Is4In6() {
				run.timeline = r.timeline(from, true)
			}
		}
		if r.progress && ev.Seq > 0 {
			fmt.Fprintf(r.stdout, "\r%s", Progress(run.tally.Total, opts.N, 40))
		}
	}
	return run
}

// write writes what a run of the probe saw: the progress bar's end, the
// table and the chart of the answers, and as opts ask the timeline and the
// held connection.
func (r *Runner) write(run trafficRun, opts TrafficOptions) error {
	t := run.tally
	if r.progress {
		fmt.Fprintln(r.stdout)
	} else {
		fmt.Fprintln(r.stdout, Progress(t.Total, opts.N, 40))
	}
	fmt.Fprintln(r.stdout)
	if err := t.WriteTable(r.stdout, r.net.Names()); err != nil {
		return err
	}
	fmt.Fprintln(r.stdout)
	if err := t.WriteChart(r.stdout, 40); err != nil {
		return err
	}
	if opts.Timeline {
		fmt.Fprintln(r.stdout)
		if err := run.timeline.Write(r.stdout); err != nil {
			return err
		}
	}
	if opts.Hold {
		fmt.Fprintln(r.stdout)
		return r.writeHeld(run.held, run.timeline)
	}
	return nil
}

// writeHeld reports the held connection's two requests (TrafficOptions.Hold)
// and fails when the connection did not survive: the second request failed,
// or went over a new connection.
func (r *Runner) writeHeld(held []Event, tl *Timeline) error {
	w := r.stdout
	if len(held) != 2 {
		return fmt.Errorf("the held connection: %d of its 2 requests reported", len(held))
	}
	names := r.net.Names()
	path := func(ev Event) string {
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
func (r *Runner) timeline(from string, ipv6 bool) *Timeline {
	p := r.net.Plan()
	h, _ := r.net.Host(from)
	if ipv6 {
		return &Timeline{
			Sender:      h.Addr6,
			Node:        p.Node.Addr6,
			Masqueraded: h.Role == topology.RolePod || !p.ClusterCIDR6.Contains(h.Addr6),
		}
	}
	return &Timeline{
		Sender:      h.Addr,
		Node:        p.Node.Addr,
		Masqueraded: h.Role == topology.RolePod || !p.ClusterCIDR.Contains(h.Addr),
	}
}
