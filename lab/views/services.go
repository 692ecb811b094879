package views

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/service"
)

// ServicePortView is one service port as `svclab web` shows it: what the
// Snapshot says of it (address, endpoints and their conditions), the path
// svcproxy gives it now (from its /status), and the connections each path
// counted.
type ServicePortView struct {
	Name     string   `json:"name"` // "default/web:http", as /status names it
	Service  string   `json:"service"`
	Type     string   `json:"type"`
	VIPs     []string `json:"vips"` // ClusterIPs
	Port     uint16   `json:"port"`
	Protocol string   `json:"protocol"`
	NodePort uint16   `json:"nodePort,omitempty"`
	// Path is the way this port's new connections take now: "userspace"
	// (the REDIRECT portal to svcproxy's listener), or the kernel path's
	// mode, "iptables", "nftables", "ipvs". In hybrid mode it changes when
	// the port is promoted or demoted; a dual-stack port shows its IPv4
	// path (each family's dataplane promotes on its own), and its counters
	// are both families' together.
	Path string `json:"path"`
	// Userspace is the connections svcproxy's userspace proxy opened for
	// the port (/status: counters.connectionsOpened); Kernel those the
	// kernel's rules counted (KernelCounters), when it counts them.
	Userspace uint64 `json:"userspace"`
	Kernel    uint64 `json:"kernel"`
	// Endpoints are every endpoint of the port, of every condition.
	Endpoints []EndpointView `json:"endpoints"`
}

// EndpointView is one endpoint of a ServicePortView.
type EndpointView struct {
	Addr        string `json:"addr"`
	Pod         string `json:"pod"` // the lab host with that address, "" for none
	Ready       bool   `json:"ready"`
	Serving     bool   `json:"serving"`
	Terminating bool   `json:"terminating"`
	// Kernel is the connections iptables' rules sent to this endpoint.
	Kernel uint64 `json:"kernel"`
}

// ServicesView is the lab's Services now: the mode svcproxy runs and each
// service port, in the Snapshot's order.
type ServicesView struct {
	Mode string `json:"mode"`
	// Offload is hybrid's kernel path ("" in the other modes).
	Offload string            `json:"offload,omitempty"`
	Ports   []ServicePortView `json:"ports"`
	// KernelCounts says what the kernel counts are in this mode, and where
	// the kernel counts nothing the page can read, that and why: a 0 there
	// is no measurement.
	KernelCounts string `json:"kernelCounts"`
	// KernelCounted is false where the kernel column cannot count.
	KernelCounted bool `json:"kernelCounted"`
}

// kernelCounts says what the kernel column counts in mode (and hybrid's
// offload), and whether it counts at all.
func kernelCounts(mode, offload string) (string, bool) {
	if mode == "hybrid" {
		switch offload {
		case "", "nftables":
			return "hybrid promotes to nftables: a promoted port's named counter (connections-...) counts its new connections; a port in userspace counts in the userspace column.", true
		case "iptables":
			return "hybrid promotes to iptables: a promoted port's SVCP-SEP- DNAT rules count its new connections; a port in userspace counts in the userspace column.", true
		case "socklb":
			return "hybrid promotes to the socket LB: its counts map counts the connect()s it rewrote for a promoted port; a port in userspace counts in the userspace column.", true
		}
		return "hybrid promotes to IPVS, which keeps its counts in its own table (ipvsadm -Ln --stats, in svclab rules --counters): the page does not read it, so a promoted port's kernel count stays 0.", false
	}
	switch mode {
	case "userspace":
		return "userspace mode: the kernel only REDIRECTs each connection to svcproxy, which counts it (the userspace column); no kernel path counts.", false
	case "iptables":
		return "each SVCP-SEP- chain's DNAT rule counts its packets (iptables-save -c): nat rules see one packet per new connection.", true
	case "nftables":
		return "plain nftables mode puts no counter in its rules, so the kernel cannot count here and the kernel column stays 0 (hybrid mode gives each promoted port a named counter).", false
	case "ipvs":
		return "IPVS keeps its counts in its own table (ipvsadm -Ln --stats, in svclab rules --counters): the page does not read it, so the kernel column stays 0.", false
	case "socklb":
		return "the socket LB's counts map counts the connect()s (and unconnected UDP datagrams) its program rewrote; a socket outside the lab's cgroup goes through nftables, which counts nothing.", true
	}
	return "", false
}

// proxyStatus is what ServicesView reads of svcproxy's /status: the
// userspace proxier's ports and, in hybrid mode, the promoter's paths.
type proxyStatus struct {
	Mode      string `json:"mode"`
	Offload   string `json:"offload"`
	Userspace *struct {
		Ports []struct {
			Name     string `json:"name"`
			Counters struct {
				ConnectionsOpened uint64 `json:"connectionsOpened"`
			} `json:"counters"`
		} `json:"ports"`
	} `json:"userspace"`
	Ports json.RawMessage `json:"ports"` // hybrid: []{name, path}; the kernel modes: their own
}

// Services reads the lab's Services (Snapshot), svcproxy's /status and the
// kernel's counters (KernelCounters) into one view.
func (v *Views) Services(ctx context.Context) (*ServicesView, error) {
	snap, err := v.src.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	body, err := v.src.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("svcproxy /status: %w", err)
	}
	kc, err := v.KernelCounters(ctx)
	if err != nil {
		return nil, err
	}
	if mode, _ := v.net.Mode(); mode == "socklb" || mode == "hybrid" {
		v.addSocketLBCounts(ctx, snap, kc)
	}
	return v.servicesView(snap, []byte(body), kc)
}

// servicesView puts a Snapshot, a /status document and the kernel's
// counters together (Services without the reading).
func (v *Views) servicesView(snap *service.Snapshot, status []byte, kc *KernelCounters) (*ServicesView, error) {
	st, err := readStatus(status)
	if err != nil {
		return nil, err
	}
	names := v.net.Names()
	view := &ServicesView{Mode: st.mode, Offload: st.offload}
	view.KernelCounts, view.KernelCounted = kernelCounts(st.mode, st.offload)
	for _, s := range snap.Services() {
		if s.Headless || s.ExternalName != "" {
			continue // nothing to proxy
		}
		for _, p := range s.Ports {
			name := p.Name.String()
			pv := ServicePortView{Name: name, Service: s.NamespacedName.String(), Type: string(s.Type),
				Port: p.Port, Protocol: string(p.Protocol), NodePort: p.NodePort,
				Path: portPath(st.mode, st.paths[name]), Userspace: st.opened[name], Kernel: kc.Ports[name]}
			for _, ip := range s.ClusterIPs {
				pv.VIPs = append(pv.VIPs, ip.String())
			}
			for _, e := range p.Endpoints {
				pv.Endpoints = append(pv.Endpoints, EndpointView{Addr: e.Addr.String(), Pod: names[e.Addr.Addr()],
					Ready: e.Ready, Serving: e.Serving, Terminating: e.Terminating, Kernel: kc.Endpoints[name][e.Addr.String()]})
			}
			view.Ports = append(view.Ports, pv)
		}
	}
	return view, nil
}

// statusSummary is what ServicesView takes from svcproxy's /status, over
// every family.
type statusSummary struct {
	mode, offload string            // the first family's
	opened        map[string]uint64 // the userspace proxier's connections, by port, every family's
	paths         map[string]string // hybrid: the first family's (IPv4's) path of each port
}

// readStatus reads svcproxy's /status. A dual-stack svcproxy runs one
// dataplane per family, and its /status is {"mode": ..., "IPv4": {...},
// "IPv6": {...}}; a single-stack one is the one family's document.
func readStatus(status []byte) (statusSummary, error) {
	sum := statusSummary{opened: map[string]uint64{}, paths: map[string]string{}}
	var fams struct {
		Mode     string   `json:"mode"`
		Families []string `json:"ipFamilies"`
	}
	if err := json.Unmarshal(status, &fams); err != nil {
		return sum, fmt.Errorf("svcproxy /status: %w", err)
	}
	docs := []json.RawMessage{status}
	if len(fams.Families) > 0 {
		var byFamily map[string]json.RawMessage
		if err := json.Unmarshal(status, &byFamily); err != nil {
			return sum, fmt.Errorf("svcproxy /status: %w", err)
		}
		docs = nil
		for _, f := range fams.Families {
			docs = append(docs, byFamily[f])
		}
	}
	for _, doc := range docs {
		var st proxyStatus
		if err := json.Unmarshal(doc, &st); err != nil {
			return sum, fmt.Errorf("svcproxy /status: %w", err)
		}
		if sum.mode == "" {
			sum.mode, sum.offload = st.Mode, st.Offload
		}
		if st.Userspace != nil {
			for _, p := range st.Userspace.Ports {
				sum.opened[p.Name] += p.Counters.ConnectionsOpened
			}
		}
		if st.Mode == "hybrid" && len(st.Ports) > 0 {
			var ports []struct{ Name, Path string }
			if err := json.Unmarshal(st.Ports, &ports); err != nil {
				return sum, fmt.Errorf("svcproxy /status: ports: %w", err)
			}
			for _, p := range ports {
				if _, ok := sum.paths[p.Name]; !ok {
					sum.paths[p.Name] = p.Path
				}
			}
		}
	}
	return sum, nil
}

// portPath is a port's path in mode: hybrid's promoter says ("" before
// its first sample: userspace); every other mode has one path for all.
func portPath(mode, hybridPath string) string {
	switch {
	case mode != "hybrid":
		return mode
	case hybridPath == "":
		return "userspace"
	default:
		return strings.ToLower(hybridPath)
	}
}
