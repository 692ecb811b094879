package exercise

import (
	"context"
	"fmt"
	"strings"
)

// checkWebEightRules: iptables mode, and web's port has eight rules in the
// node's nat table, as `iptables-save -t nat | grep -c default/web:http`
// counts them. Three pods cost eleven: the ClusterIP rule and the
// masquerade mark, then per ready endpoint a line in SVCP-SVC- and the two
// rules of its SVCP-SEP- chain. An endpoint that is not ready gets none.
func checkWebEightRules(ctx context.Context, l KernelLab) (Result, error) {
	v, err := l.Services(ctx)
	if err != nil {
		return Result{}, err
	}
	web, ok := port(v, "default/web:http")
	if !ok {
		return Result{Saw: "the lab has no Service web", Hint: "bring the lab up again: svclab up --mode iptables"}, nil
	}
	if v.Mode != "iptables" {
		return Result{Saw: "svcproxy runs " + v.Mode + " mode", Hint: "the count is iptables mode's, where each endpoint has rules of its own: svclab mode iptables"}, nil
	}
	save, err := output(ctx, l, "node", "iptables-save", "-t", "nat")
	if err != nil {
		return Result{}, err
	}
	n := 0
	for _, line := range strings.Split(save, "\n") {
		if strings.HasPrefix(line, "-A ") && strings.Contains(line, "default/web:http") {
			n++
		}
	}
	var eps []string
	for _, e := range web.Endpoints {
		eps = append(eps, endpointWords(e))
	}
	now := fmt.Sprintf("web:http has %d rules in the nat table; its endpoints: %s", n, strings.Join(eps, ", "))
	switch {
	case n > 8:
		return Result{Saw: now, Hint: "each ready endpoint costs three rules: its line in SVCP-SVC- and its SVCP-SEP- chain's two. Take one pod out of web's new connections, its server running (lab 03 did it)"}, nil
	case n < 8:
		return Result{Saw: now, Hint: "one pod fewer than three is eight rules: make the others ready again (svclab pod NAME --ready=true)"}, nil
	}
	return Result{Done: true, Saw: now + ": two ready endpoints cost three rules fewer than three"}, nil
}
