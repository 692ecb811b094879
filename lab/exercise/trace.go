package exercise

import (
	"context"
	"regexp"
	"strings"

	"github.com/svcproxy/svcproxy/lab/views"
)

var dnatTo = regexp.MustCompile(`DNAT (?:to )?([0-9.]+:[0-9]+)`)

// checkLocalOnlyWeb1: a packet from the outside host to web-local's node
// port 30081 (externalTrafficPolicy Local), traced through the node's live
// rules, can go one way only: a DNAT to web-1, with no MASQUERADE. The
// policy keeps the client's address and sends only to this node's ready
// endpoints; web-2's slice says it runs on node-2, so web-0 is the one to
// take out.
func checkLocalOnlyWeb1(ctx context.Context, l KernelLab) (Result, error) {
	v, err := l.Services(ctx)
	if err != nil {
		return Result{}, err
	}
	local, ok := port(v, "default/web-local:http")
	if !ok {
		return Result{Saw: "the lab has no Service web-local", Hint: "bring the lab up again: svclab up --mode iptables"}, nil
	}
	pods := map[string]string{} // "198.19.1.11:8080" -> "web-1"
	for _, e := range local.Endpoints {
		pods[e.Addr] = e.Pod
	}
	rep, err := l.TraceReport(ctx, views.TraceOptions{From: "outside", Target: "198.19.0.1:30081"})
	if err != nil {
		return Result{}, err
	}
	ways := rep.Ways
	if len(ways) == 0 {
		ways = []views.TraceWay{{Result: rep.Result, P: 1}}
	}
	var saw []string
	onlyWeb1, masq := true, false
	for _, w := range ways {
		m := dnatTo.FindStringSubmatch(w.Result)
		switch {
		case strings.Contains(w.Result, "REDIRECT"):
			return Result{Saw: "svcproxy runs " + v.Mode + " mode: its own connection reaches the pod, which sees the node whatever the policy",
				Hint: "the task is a kernel mode's, where the rules keep the client's address: svclab mode iptables"}, nil
		case m == nil:
			saw = append(saw, firstLine(w.Result))
			onlyWeb1 = false
			continue
		}
		name := pods[m[1]]
		if name == "" {
			name = m[1]
		}
		if name != "web-1" {
			onlyWeb1 = false
		}
		words := "DNAT to " + name
		if strings.Contains(w.Result, "MASQUERADE") {
			masq = true
			words += ", MASQUERADE"
		}
		saw = append(saw, words)
	}
	now := "a packet from outside to 198.19.0.1:30081 can go: " + strings.Join(saw, "; ")
	switch {
	case masq:
		return Result{Saw: now, Hint: "the pod would see the node: web-local's externalTrafficPolicy must stay Local (lab/cluster/manifests.yaml has it)"}, nil
	case len(saw) == 1 && strings.HasPrefix(saw[0], "DROP"):
		return Result{Saw: now, Hint: "this node has no ready endpoint of web-local left, so its rules DROP: keep web-1 ready (svclab pod web-1 --ready=true)"}, nil
	case !onlyWeb1:
		return Result{Saw: now, Hint: "policy Local sends only to this node's ready endpoints: which of them is not web-1? (svclab pod NAME --ready=false)"}, nil
	}
	return Result{Done: true, Saw: now + ": web-1 is this node's only ready endpoint of web-local, and it sees the outside host"}, nil
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
