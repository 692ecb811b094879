package pods

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"text/tabwriter"
)

// Timeline counts a probe's answers per second by the path that carried
// them, so that a hybrid promotion shows as it happens (svclab traffic
// --timeline).
//
// The path is read from the address the pod saw. svcproxy's userspace proxy
// opens its own connection to the pod, so the pod sees the node; the kernel
// paths (iptables, nftables, IPVS) only rewrite the destination, so the pod
// sees the sender. A kernel path masquerades too in two cases, a sender
// beyond --cluster-cidr (the outside host) and a pod that reaches itself: for
// those senders an answer "via the node" may be either path, and the timeline
// says so.
type Timeline struct {
	// Sender is the address the requests are sent from; Node the node's.
	Sender, Node netip.Addr
	// Masqueraded says the kernel paths masquerade this sender's traffic
	// too (the outside host, a pod): "USERSPACE" is then "via the node".
	Masqueraded bool
	Seconds     []TimelineSecond
}

// TimelineSecond is one second of a Timeline.
type TimelineSecond struct {
	Kernel    int // the pod saw the sender: the kernel carried it
	Userspace int // the pod saw the node: svcproxy's userspace proxy carried it
	Other     int // the pod saw some other address
	Failed    int
}

// Add counts one request's Event (the address line is ignored).
func (tl *Timeline) Add(ev Event) {
	if ev.Seq == 0 {
		return
	}
	sec := int(ev.At)
	for len(tl.Seconds) <= sec {
		tl.Seconds = append(tl.Seconds, TimelineSecond{})
	}
	s := &tl.Seconds[sec]
	switch tl.PathOf(ev) {
	case PathFailed:
		s.Failed++
	case PathKernel:
		s.Kernel++
	case PathUserspace:
		s.Userspace++
	default:
		s.Other++
	}
}

// The paths PathOf tells apart.
const (
	PathKernel    = "kernel"
	PathUserspace = "userspace"
	PathOther     = "other"
	PathFailed    = "failed"
)

// PathOf says which path carried a request's answer, by the address the
// pod saw: PathKernel, PathUserspace, PathOther, or PathFailed when there
// was no answer. `svclab web` draws its chart with it.
func (tl *Timeline) PathOf(ev Event) string {
	if ev.Err != "" {
		return PathFailed
	}
	saw := netip.Addr{}
	if host, _, err := net.SplitHostPort(ev.From); err == nil {
		saw, _ = netip.ParseAddr(host)
	}
	switch saw {
	case tl.Sender:
		return PathKernel
	case tl.Node:
		return PathUserspace
	default:
		return PathOther
	}
}

// Write writes one row per second, with a bar of the answers: "u" for each
// one through userspace, "k" for each through the kernel, "x" for failures.
func (tl *Timeline) Write(w io.Writer) error {
	others := false
	for _, s := range tl.Seconds {
		others = others || s.Other > 0
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "SECOND\tUSERSPACE\tKERNEL\tFAILED\t"
	if others {
		head = "SECOND\tUSERSPACE\tKERNEL\tOTHER\tFAILED\t"
	}
	fmt.Fprintln(tw, head)
	for i, s := range tl.Seconds {
		bar := timelineBar(s)
		if others {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t  %s\n", i, s.Userspace, s.Kernel, s.Other, s.Failed, bar)
		} else {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t  %s\n", i, s.Userspace, s.Kernel, s.Failed, bar)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "USERSPACE: the pod saw the node (%s), svcproxy's own connection; KERNEL: the pod\nsaw the sender (%s), a DNAT or an IPVS virtual server.\n", tl.Node, tl.Sender)
	if err == nil && tl.Masqueraded {
		_, err = fmt.Fprintf(w, "From %s the kernel paths masquerade too: USERSPACE counts every answer that\ncame via the node's address. Send from the client to tell the paths apart.\n", tl.Sender)
	}
	return err
}

// timelineBar is one second's answers as characters, "u" through userspace,
// "k" through the kernel, "?" other, "x" failed; at most 60 wide (then each
// character stands for several answers, rounded up).
func timelineBar(s TimelineSecond) string {
	total := s.Userspace + s.Kernel + s.Other + s.Failed
	per := max(1, (total+59)/60)
	n := func(k int) int { return (k + per - 1) / per }
	return strings.Repeat("u", n(s.Userspace)) + strings.Repeat("k", n(s.Kernel)) + strings.Repeat("?", n(s.Other)) + strings.Repeat("x", n(s.Failed))
}
