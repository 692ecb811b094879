package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/nsenter"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/service"
)

// What `svclab rules` and `svclab trace` show of the socket LB (--mode
// socklb): its two maps, services (VIP, port, protocol) -> backends in slot
// order, and a connect() walked through the program over them by
// kernel/socklb's Fake, the same tracer its unit tests read.
//
// The maps are read from svcproxy's /status ("maps" of each family): what
// its last sync wrote, element by element, and what its checks read back
// from the kernel and compare (a difference is repaired and counted in
// "repairs"). The kernel's own LRU maps, ClientIP affinity's last backends
// and the reverse entries of translated sockets, are not in /status: they
// change on every connect(), in the kernel only.

// socketLBPort is one service port in /status's socket-LB maps.
type socketLBPort struct {
	Port      string   `json:"port"` // "default/web:http"
	Protocol  string   `json:"protocol"`
	Frontends []string `json:"frontends"` // "198.18.0.20:80"
	Backends  []string `json:"backends"`  // in slot order
	Affinity  string   `json:"affinity"`  // a Go duration, "" without
}

// socketLBFamily is the part of a family's /status document ("IPv4",
// "IPv6") that the socket LB fills.
type socketLBFamily struct {
	Mode string `json:"mode"`
	Maps *struct {
		Ports []socketLBPort `json:"ports"`
	} `json:"maps"`
}

// socketLBMaps reads the socket LB's maps from svcproxy's /status, IPv4's
// ports first. ok is false when svcproxy runs no socket LB.
func (l *Lab) socketLBMaps(ctx context.Context) (ports []socketLBPort, ok bool, err error) {
	body, err := l.NodeGet(ctx, "/status")
	if err != nil {
		return nil, false, fmt.Errorf("svcproxy /status: %w", err)
	}
	return parseSocketLBStatus([]byte(body))
}

// parseSocketLBStatus is socketLBMaps without the reading.
func parseSocketLBStatus(body []byte) (ports []socketLBPort, ok bool, err error) {
	var st map[string]json.RawMessage
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, false, fmt.Errorf("svcproxy /status: %w", err)
	}
	for _, fam := range []string{"IPv4", "IPv6"} {
		raw, found := st[fam]
		if !found {
			continue
		}
		var f socketLBFamily
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, false, fmt.Errorf("svcproxy /status: %s: %w", fam, err)
		}
		if f.Maps != nil {
			ok = true
			ports = append(ports, f.Maps.Ports...)
		}
	}
	return ports, ok, nil
}

// socketLBFake loads ports into a kernel/socklb Fake: one services element
// per frontend, its backends in slot order.
func socketLBFake(ctx context.Context, ports []socketLBPort) (*ksocklb.Fake, error) {
	f := ksocklb.NewFake()
	for _, p := range ports {
		e := ksocklb.Entry{}
		if p.Affinity != "" {
			d, err := time.ParseDuration(p.Affinity)
			if err != nil {
				return nil, fmt.Errorf("svcproxy /status: port %s: affinity %q: %w", p.Port, p.Affinity, err)
			}
			e.AffinityTimeout = d
		}
		for _, b := range p.Backends {
			ap, err := netip.ParseAddrPort(b)
			if err != nil {
				return nil, fmt.Errorf("svcproxy /status: port %s: backend %q: %w", p.Port, b, err)
			}
			e.Backends = append(e.Backends, ap)
		}
		proto := ksocklb.TCP
		if p.Protocol == "UDP" {
			proto = ksocklb.UDP
		}
		for _, fe := range p.Frontends {
			ap, err := netip.ParseAddrPort(fe)
			if err != nil {
				return nil, fmt.Errorf("svcproxy /status: port %s: frontend %q: %w", p.Port, fe, err)
			}
			svc := ksocklb.Service{VIP: ap.Addr(), Port: ap.Port(), Protocol: proto}
			if err := f.SetService(ctx, svc, e); err != nil {
				return nil, fmt.Errorf("svcproxy /status: port %s: %w", p.Port, err)
			}
		}
	}
	return f, nil
}

// formatSocketLB writes the maps as `svclab rules` shows them: each
// frontend, the service port it stands for, and its backends in slot order
// with the pods' names. keep, when not nil, says which ports to show.
func (l *Lab) formatSocketLB(ports []socketLBPort, keep func(port string) bool) string {
	var b strings.Builder
	subtree, _ := l.CgroupSubtree()
	fmt.Fprintf(&b, "\n# socket LB: connect4/connect6 (sendmsg, recvmsg, getpeername) attached at %s;\n", subtree)
	b.WriteString("# its services and backends maps, as svcproxy wrote and checks them (/status)\n")
	n := 0
	for _, p := range ports {
		if keep != nil && !keep(p.Port) {
			continue
		}
		for _, fe := range p.Frontends {
			n++
			fmt.Fprintf(&b, "%s/%s  (%s)\n", fe, p.Protocol, p.Port)
			if len(p.Backends) == 0 {
				b.WriteString("    count 0: connect() left alone, the nftables path beside rejects it\n")
			}
			for slot, be := range p.Backends {
				name := ""
				if ap, err := netip.ParseAddrPort(be); err == nil {
					name = withNameSuffix(l, ap.Addr())
				}
				fmt.Fprintf(&b, "    slot %d -> %s%s\n", slot, be, name)
			}
			if p.Affinity != "" {
				fmt.Fprintf(&b, "    ClientIP affinity %s, keyed by the client's network namespace\n", p.Affinity)
			}
		}
	}
	if n == 0 {
		b.WriteString("(none)\n")
	}
	return b.String()
}

// portsOfService is a keep function for formatSocketLB: the ports of Service svc.
func portsOfService(svc *service.Service) func(string) bool {
	prefix := svc.NamespacedName.String() + ":"
	return func(port string) bool { return strings.HasPrefix(port, prefix) }
}

// netnsCookie is what bpf_get_netns_cookie returns for a socket of host
// ns: the kernel's cookie of that network namespace (SO_NETNS_COOKIE, Linux
// 5.14), the key of the socket LB's ClientIP affinity. 0 if it cannot be read.
func netnsCookie(ns string) uint64 {
	var cookie uint64
	_ = nsenter.Run(filepath.Join(netnsDir, ns), func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		cookie = v
		return err
	})
	return cookie
}
