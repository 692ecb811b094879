package exercise

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

var (
	ipv4 = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)
	// recentSet is a web-sticky endpoint chain's rule that puts the client
	// on the chain's recent list and DNATs (iptables-save -t nat).
	recentSet = regexp.MustCompile(`--comment "?default/web-sticky:http"? .*--set --name (\S+) .*--to-destination (\S+)`)
	recentSrc = regexp.MustCompile(`^src=(\S+)`)
)

// checkTwoStickyClients: the kernel's memory of web-sticky's clients (an
// nftables set per endpoint, or an iptables recent list per endpoint
// chain) holds two client addresses or more.
func checkTwoStickyClients(ctx context.Context, l KernelLab) (Result, error) {
	v, err := l.Services(ctx)
	if err != nil {
		return Result{}, err
	}
	sticky, ok := port(v, "default/web-sticky:http")
	if !ok {
		return Result{Saw: "the lab has no Service web-sticky", Hint: "bring the lab up again: svclab up"}, nil
	}
	pods := map[string]string{} // "198.19.1.10:8080" -> "web-0"
	for _, e := range sticky.Endpoints {
		pods[e.Addr] = e.Pod
	}
	var clients map[string]string // client address -> the endpoint it sticks to
	var where string
	switch v.Mode {
	case "nftables":
		out, err := output(ctx, l, "node", "nft", "list", "table", "ip", "svcproxy")
		if err != nil {
			return Result{}, err
		}
		clients, where = nftAffinity(out), "nftables' affinity sets"
	case "iptables":
		if clients, err = recentLists(ctx, l); err != nil {
			return Result{}, err
		}
		where = "iptables' recent lists"
	default:
		return Result{Saw: "svcproxy runs " + v.Mode + " mode, whose memory of clients no command reads (userspace: a map in svcproxy's Balancer)",
			Hint: "the task is a kernel mode's, where the memory is a table you can list: svclab mode nftables (or iptables)"}, nil
	}
	var held []string
	for c, ep := range clients {
		if p := pods[ep]; p != "" {
			ep = p
		}
		held = append(held, c+" -> "+ep)
	}
	sort.Strings(held)
	now := where + " for web-sticky hold no client"
	if len(held) > 0 {
		now = where + " for web-sticky hold " + strings.Join(held, ", ")
	}
	switch len(held) {
	case 0:
		return Result{Saw: now, Hint: "no client has connected to web-sticky since svcproxy made these rules: send some (svclab traffic --n 3 web-sticky)"}, nil
	case 1:
		return Result{Saw: now, Hint: "affinity is per client address: connect to web-sticky from another host (svclab exec HOST -- curl -s ADDRESS)"}, nil
	}
	return Result{Done: true, Saw: now + fmt.Sprintf(": %d clients, each with the pod it got first", len(held))}, nil
}

// nftAffinity reads, from `nft list table ip svcproxy`, the clients in
// web-sticky's affinity sets ("set affinity-HASH-default/web-sticky/tcp/
// http__198.19.1.10/8080 { ... elements = { 198.19.1.2 expires 9m58s } }"),
// with the endpoint each set belongs to.
func nftAffinity(list string) map[string]string {
	clients := map[string]string{}
	endpoint := "" // of the set being read, "" outside one
	for _, line := range strings.Split(list, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "set affinity-") && strings.Contains(line, "-default/web-sticky/"):
			_, ep, _ := strings.Cut(strings.TrimSuffix(line, " {"), "__")
			if i := strings.LastIndex(ep, "/"); i >= 0 {
				ep = ep[:i] + ":" + ep[i+1:]
			}
			endpoint = ep
		case endpoint != "" && line == "}":
			endpoint = ""
		case endpoint != "":
			for _, a := range ipv4.FindAllString(line, -1) {
				clients[a] = endpoint
			}
		}
	}
	return clients
}

// recentLists reads the node's recent lists of web-sticky's endpoint
// chains (/proc/net/xt_recent/SVCP-SEP-...), with the endpoint each list
// belongs to.
func recentLists(ctx context.Context, l KernelLab) (map[string]string, error) {
	save, err := output(ctx, l, "node", "iptables-save", "-t", "nat")
	if err != nil {
		return nil, err
	}
	clients := map[string]string{}
	for _, line := range strings.Split(save, "\n") {
		m := recentSet.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		list, err := output(ctx, l, "node", "cat", "/proc/net/xt_recent/"+m[1])
		if err != nil {
			return nil, err
		}
		for _, entry := range strings.Split(list, "\n") {
			if src := recentSrc.FindStringSubmatch(entry); src != nil {
				clients[src[1]] = m[2]
			}
		}
	}
	return clients, nil
}
