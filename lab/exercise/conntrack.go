package exercise

import (
	"context"
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/lab/views"
)

// webEntries reads the node's conntrack entries of web's connections, as
// `svclab conntrack web` lists them.
func webEntries(ctx context.Context, l KernelLab) ([]views.ConntrackEntry, error) {
	cv, err := l.ConntrackReport(ctx, views.ConntrackOptions{Service: "web"})
	if err != nil {
		return nil, err
	}
	return cv.Entries, nil
}

// entryWords is a conntrack entry in a few words: "198.19.1.2:41000 ->
// 198.18.0.20:80, DNAT to 198.19.1.10 (web-0)".
func entryWords(e views.ConntrackEntry) string {
	return e.Sent[0] + " -> " + e.Sent[1] + ", " + e.Means
}

// entriesWords says what conntrack holds for web: each entry when there
// are one or two, else how many of each kind.
func entriesWords(entries []views.ConntrackEntry) string {
	if len(entries) == 0 {
		return "conntrack holds no entry for web"
	}
	n := fmt.Sprintf("%d entries", len(entries))
	if len(entries) == 1 {
		n = "1 entry"
	}
	var w []string
	if len(entries) <= 2 {
		for _, e := range entries {
			w = append(w, entryWords(e))
		}
		return "conntrack holds " + n + " for web: " + strings.Join(w, "; ")
	}
	kinds := map[string]int{}
	for _, e := range entries {
		kinds[entryKind(e)]++
	}
	for _, k := range []string{"DNAT", "REDIRECTed to svcproxy", "svcproxy's own", "no rewrite"} {
		if kinds[k] > 0 {
			w = append(w, fmt.Sprintf("%d %s", kinds[k], k))
		}
	}
	return "conntrack holds " + n + " for web: " + strings.Join(w, ", ")
}

// entryKind is what the kernel did to an entry's connection, in a word or
// three.
func entryKind(e views.ConntrackEntry) string {
	switch {
	case isDNAT(e):
		return "DNAT"
	case strings.HasPrefix(e.Means, "REDIRECT"):
		return "REDIRECTed to svcproxy"
	case strings.HasPrefix(e.Means, "svcproxy's own"):
		return "svcproxy's own"
	}
	return "no rewrite"
}

// isDNAT says the kernel rewrote the entry's destination to a pod.
func isDNAT(e views.ConntrackEntry) bool { return strings.HasPrefix(e.Means, "DNAT to ") }

// checkOneDNATEntry: exactly one entry for web, and it is a DNAT. In
// userspace mode one request leaves two entries (the REDIRECTed connection
// and svcproxy's own); in socklb mode the entry has no rewrite at all.
func checkOneDNATEntry(ctx context.Context, l KernelLab) (Result, error) {
	entries, err := webEntries(ctx, l)
	if err != nil {
		return Result{}, err
	}
	saw := entriesWords(entries)
	redirected := false
	for _, e := range entries {
		k := entryKind(e)
		redirected = redirected || k == "REDIRECTed to svcproxy" || k == "svcproxy's own"
	}
	switch {
	case len(entries) == 1 && isDNAT(entries[0]):
		return Result{Done: true, Saw: saw + ": one connection, and the kernel rewrote its destination to a pod"}, nil
	case redirected:
		return Result{Saw: saw, Hint: "in userspace mode one request is two connections: the client's, REDIRECTed to svcproxy, and svcproxy's own to a pod. Which mode makes it one?"}, nil
	case len(entries) == 0:
		return Result{Saw: saw, Hint: "send one request to web (svclab traffic --n 1 web)"}, nil
	case len(entries) > 1:
		return Result{Saw: saw, Hint: "one connection is one entry: empty the table first (svclab conntrack --flush), then send one request"}, nil
	}
	return Result{Saw: saw, Hint: "that entry has no DNAT: the kernel did not rewrite it on the way (lab 12's socket LB rewrites connect() instead). Which mode DNATs in the nat table?"}, nil
}

// checkSocketLBMissed: socklb mode, and an entry of web's that was DNATed
// (by the nftables path beside the socket LB): a connection from a process
// the cgroup hook does not see.
func checkSocketLBMissed(ctx context.Context, l KernelLab) (Result, error) {
	v, err := l.Services(ctx)
	if err != nil {
		return Result{}, err
	}
	if v.Mode != "socklb" {
		return Result{Saw: "svcproxy runs " + v.Mode + " mode", Hint: "the task is the socket LB's: svclab mode socklb"}, nil
	}
	entries, err := webEntries(ctx, l)
	if err != nil {
		return Result{}, err
	}
	for _, e := range entries {
		if isDNAT(e) {
			return Result{Done: true, Saw: "svcproxy runs socklb mode, and conntrack holds " + entryWords(e) +
				": no socket hook saw this connection, so the nftables path DNATed its packets"}, nil
		}
	}
	return Result{Saw: entriesWords(entries),
		Hint: "every connection to web came from a process in the lab's cgroup, whose connect() the socket LB rewrote. Which host's connections reach the node as packets, with no socket hook on the way? (Who the hook sees)"}, nil
}
