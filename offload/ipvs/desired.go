package ipvs

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/kernel/ipset"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/service"
)

// wanted is the IPVS state a Snapshot asks for.
type wanted struct {
	family service.Family
	vss    map[kipvs.Key]*wantedVS
	addrs  map[netip.Addr]bool // on the dummy interface
	// Members of the masquerade ip sets (masq.go).
	clusterIPs, external, loopback map[string]bool
}

type wantedVS struct {
	vs    kipvs.VirtualServer
	reals map[netip.AddrPort]int // real server -> weight
	port  service.PortName       // for error messages
}

// desired computes the virtual servers, real servers and interface addresses for
// snap. It is pure. Bad annotations are reported and replaced by defaults, so one
// Service's typo does not stop the others.
func (d *Dataplane) desired(snap *service.Snapshot) (wanted, []error) {
	w := wanted{
		family: d.cfg.Family,
		vss:    map[kipvs.Key]*wantedVS{}, addrs: map[netip.Addr]bool{},
		clusterIPs: map[string]bool{}, external: map[string]bool{}, loopback: map[string]bool{},
	}
	var errs []error
	fam := d.cfg.Family
	for _, port := range snap.Ports() {
		svc := port.Service
		if svc.Type == service.TypeExternalName || (d.cfg.Carries != nil && !d.cfg.Carries(port.Name)) {
			continue
		}
		proto := kipvs.Protocol(port.Protocol)
		sched, err := d.scheduler(svc)
		if err != nil {
			errs = append(errs, err)
		}
		weights, err := weights(svc)
		if err != nil {
			errs = append(errs, err)
		}
		// What a virtual server sends to: the endpoints for policy Cluster
		// (topology hints applied) or, where the policy is Local, this
		// node's; service.Port.Categorize, as kube-proxy's syncEndpoint
		// calls CategorizeEndpoints.
		eps := fam.Port(port).Categorize(d.cfg.NodeName, snap.Node())
		internal, external := eps.Cluster, eps.Cluster
		if svc.InternalPolicyLocal {
			internal = eps.Local
		}
		if svc.ExternalPolicyLocal {
			external = eps.Local
		}

		// masq is the ip set of the address, if any: traffic to an external address
		// with policy Local keeps its source (no masquerade).
		add := func(ip netip.Addr, portNum uint16, eps []service.Endpoint, onDummy bool, masq map[string]bool) {
			vs := kipvs.VirtualServer{
				Key:       kipvs.Key{Protocol: proto, Addr: netip.AddrPortFrom(ip, portNum)},
				Scheduler: sched,
			}
			if svc.Affinity.ClientIP {
				vs.Persistent = true
				vs.Timeout = svc.Affinity.Timeout
				if vs.Timeout <= 0 {
					vs.Timeout = service.DefaultAffinityTimeout
				}
			}
			wvs := &wantedVS{vs: vs, reals: map[netip.AddrPort]int{}, port: port.Name}
			for _, ep := range fam.Endpoints(eps) { // masquerading keeps the family
				wvs.reals[ep.Addr] = weightOf(weights, ep.Addr.Addr())
				a := ep.Addr.Addr()
				w.loopback[ipset.IPPortIP(a, string(proto), ep.Addr.Port(), a)] = true
			}
			w.vss[vs.Key] = wvs
			if masq != nil {
				masq[ipset.IPPort(ip, string(proto), portNum)] = true
			}
			if onDummy {
				w.addrs[ip] = true
			}
		}
		extSet := w.external
		if svc.ExternalPolicyLocal {
			extSet = nil
		}
		for _, ip := range fam.Addrs(svc.ClusterIPs) {
			add(ip, port.Port, internal, true, w.clusterIPs)
		}
		for _, ip := range fam.Addrs(append(slices.Clone(svc.ExternalIPs), svc.LoadBalancerIPs...)) {
			add(ip, port.Port, external, true, extSet)
		}
		if port.NodePort != 0 {
			for _, ip := range d.cfg.NodePortIPs {
				add(ip, port.NodePort, external, false, extSet)
			}
		}
	}
	return w, errs
}

func (d *Dataplane) scheduler(svc *service.Service) (string, error) {
	s, ok := svc.Annotations[SchedulerAnnotation]
	if !ok {
		return d.cfg.Scheduler, nil
	}
	if !kipvs.ValidScheduler(s) {
		return d.cfg.Scheduler, fmt.Errorf("service %s: annotation %s %q: not one of %v; using %q",
			svc.NamespacedName, SchedulerAnnotation, s, kipvs.Schedulers, d.cfg.Scheduler)
	}
	return s, nil
}

// weights parses WeightsAnnotation: "IP=weight,IP=weight". On error it returns none
// (every endpoint weighs 1).
func weights(svc *service.Service) (map[netip.Addr]int, error) {
	s, ok := svc.Annotations[WeightsAnnotation]
	if !ok {
		return nil, nil
	}
	out := map[netip.Addr]int{}
	for _, item := range strings.Split(s, ",") {
		ipS, wS, ok := strings.Cut(strings.TrimSpace(item), "=")
		ip, err1 := netip.ParseAddr(ipS)
		wt, err2 := strconv.Atoi(wS)
		if !ok || err1 != nil || err2 != nil || wt < 0 || wt > 65535 {
			return nil, fmt.Errorf("service %s: annotation %s %q: item %q: want IP=weight (0..65535)",
				svc.NamespacedName, WeightsAnnotation, s, item)
		}
		out[ip] = wt
	}
	return out, nil
}

func weightOf(weights map[netip.Addr]int, ip netip.Addr) int {
	if w, ok := weights[ip]; ok {
		return w
	}
	return 1
}

// hostPrefix is the /32 or /128 of ip, as a service IP is put on the dummy interface.
func hostPrefix(ip netip.Addr) netip.Prefix { return netip.PrefixFrom(ip, ip.BitLen()) }
