package exercise

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
)

// The checks of the labs beyond one node's svcproxy: the IPVS VM
// (tutorial 07). Each reads the kernel itself, as the learner's own
// commands there would (ipvsadm -Ln).

// IPVSLab is a lab whose node's IPVS a check reads (lab.Lab).
type IPVSLab interface {
	Lab
	// IPVS calls read with the node's IPVS, as ipvsadm reads it (netlink,
	// from inside the node's network namespace).
	IPVS(ctx context.Context, read func(kipvs.Interface) error) error
}

// checkWebWeighted, tutorial 07's: web's virtual server schedules with
// wrr, and web-0 weighs three times each of the two other pods, so it gets
// three of every five new connections.
func checkWebWeighted(ctx context.Context, l Lab) (Result, error) {
	v, err := l.Services(ctx)
	if err != nil {
		return Result{}, err
	}
	web, ok := port(v, "default/web:http")
	if !ok || len(web.VIPs) == 0 {
		return Result{Saw: "the lab has no Service web", Hint: "bring the lab up again: svclab up --mode ipvs"}, nil
	}
	if v.Mode != "ipvs" {
		return Result{Saw: "svcproxy runs " + v.Mode + " mode, which puts nothing in IPVS",
			Hint: "the task is IPVS's: in the VM of lab 07 (make lab-ipvs-shell), svclab mode ipvs"}, nil
	}
	il, ok := l.(IPVSLab)
	if !ok {
		return Result{}, errors.New("this lab cannot read the node's IPVS")
	}
	vip, err := netip.ParseAddr(web.VIPs[0])
	if err != nil {
		return Result{}, fmt.Errorf("web's ClusterIP: %w", err)
	}
	key := kipvs.Key{Protocol: kipvs.Protocol(strings.ToUpper(web.Protocol)), Addr: netip.AddrPortFrom(vip, web.Port)}
	var vs *kipvs.VirtualServer
	var reals []kipvs.RealServer
	err = il.IPVS(ctx, func(ipvs kipvs.Interface) error {
		vss, err := ipvs.VirtualServers(ctx)
		if err != nil {
			return err
		}
		for i := range vss {
			if vss[i].Key == key {
				vs = &vss[i]
				reals, err = ipvs.RealServers(ctx, key)
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("the node's IPVS: %w", err)
	}
	if vs == nil {
		return Result{Saw: "IPVS has no virtual server " + key.String() + " for web",
			Hint: "svcproxy has not written web's virtual server: its log says why (svclab exec node -- tail /run/svclab/svcproxy.log)"}, nil
	}
	// Each real server's weight, by pod.
	pods := map[string]string{}
	for _, e := range web.Endpoints {
		pods[e.Addr] = e.Pod
	}
	slices.SortFunc(reals, func(a, b kipvs.RealServer) int { return a.Addr.Compare(b.Addr) })
	weight := map[string]int{}
	var saw []string
	for _, rs := range reals {
		name := pods[rs.Addr.String()]
		if name == "" {
			name = rs.Addr.String()
		}
		weight[name] = rs.Weight
		saw = append(saw, fmt.Sprintf("%s weight %d", name, rs.Weight))
	}
	now := fmt.Sprintf("web's virtual server %s schedules with %s; its real servers: %s", key, vs.Scheduler, strings.Join(saw, ", "))
	w0, w1, w2 := weight["web-0"], weight["web-1"], weight["web-2"]
	switch {
	case len(reals) != 3 || w1 == 0 || w2 == 0:
		return Result{Saw: now, Hint: "the task keeps all three pods in web, each with a share: `svclab pod NAME --ready=true` brings one back"}, nil
	case vs.Scheduler != "wrr" && w0 == w1 && w1 == w2:
		return Result{Saw: now, Hint: "which scheduler takes the real servers in turn, by their weights? And how does a Service give one of them more weight? (the Schedulers section; the lab's Services are in /run/svclab/services.yaml, which svcproxy reloads)"}, nil
	case vs.Scheduler != "wrr":
		return Result{Saw: now, Hint: "the weights are there, but " + vs.Scheduler + " does not take the real servers in turn by weight: which scheduler does? (the annotation svcproxy.io/ipvs-scheduler names it for web alone)"}, nil
	case w0 == w1 && w1 == w2:
		return Result{Saw: now, Hint: "wrr with equal weights is rr: give web-0 more weight than the others with the annotation svcproxy.io/ipvs-weights on web"}, nil
	case w1 != w2 || w0 != 3*w1:
		return Result{Saw: now, Hint: fmt.Sprintf("wrr gives each real server its weight's share of the sum: web-0 gets %d of every %d; three of every five is web-0 weighing three times each of the others", w0, w0+w1+w2)}, nil
	}
	return Result{Done: true, Saw: now + ": wrr sends web-0 three of every five new connections"}, nil
}
