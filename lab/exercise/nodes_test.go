package exercise

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
)

// ipvsLab is the IPVS VM's lab: web in mode, its virtual server in a fake
// IPVS with scheduler sched and the pods' weights.
type ipvsLab struct {
	fakeLab
	ipvs *kipvs.Fake
}

func (l ipvsLab) IPVS(_ context.Context, read func(kipvs.Interface) error) error { return read(l.ipvs) }

func newIPVSLab(t *testing.T, mode, sched string, weights ...int) ipvsLab {
	t.Helper()
	l := lab(mode, "ready", mode)
	f := kipvs.NewFake()
	key := kipvs.Key{Protocol: "TCP", Addr: netip.MustParseAddrPort("198.18.0.20:80")}
	l.v.Ports[0].VIPs, l.v.Ports[0].Port, l.v.Ports[0].Protocol = []string{"198.18.0.20"}, 80, "TCP"
	if mode == "ipvs" {
		if err := f.AddVirtualServer(t.Context(), kipvs.VirtualServer{Key: key, Scheduler: sched}); err != nil {
			t.Fatal(err)
		}
		for i, w := range weights {
			rs := kipvs.RealServer{Addr: netip.MustParseAddrPort(fmt.Sprintf("198.19.1.%d:8080", 10+i)), Weight: w}
			if err := f.AddRealServer(t.Context(), key, rs); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ipvsLab{l, f}
}

func TestIPVSCheck(t *testing.T) {
	e, err := Find("07")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		lab  ipvsLab
		done bool
		hint string
	}{
		{newIPVSLab(t, "ipvs", "wrr", 3, 1, 1), true, ""},
		{newIPVSLab(t, "ipvs", "wrr", 6, 2, 2), true, ""},
		{newIPVSLab(t, "ipvs", "sh", 1, 1, 1), false, "which scheduler takes the real servers in turn"},
		{newIPVSLab(t, "ipvs", "rr", 3, 1, 1), false, "rr does not take the real servers in turn by weight"},
		{newIPVSLab(t, "ipvs", "wrr", 1, 1, 1), false, "wrr with equal weights is rr"},
		{newIPVSLab(t, "ipvs", "wrr", 3, 2, 1), false, "web-0 gets 3 of every 6"},
		{newIPVSLab(t, "ipvs", "wrr", 3, 1), false, "keeps all three pods"},
		{newIPVSLab(t, "iptables", ""), false, "svclab mode ipvs"},
	} {
		r, err := e.Check(t.Context(), tt.lab)
		if err != nil {
			t.Fatal(err)
		}
		if r.Done != tt.done || r.Saw == "" || !strings.Contains(r.Hint, tt.hint) || (r.Done && r.Hint != "") {
			t.Errorf("IPVS %s: %+v; want done %v with a hint containing %q", tt.lab.ipvs.Dump(), r, tt.done, tt.hint)
		}
	}
	// A lab that has no IPVS to read is an error, not an undone task.
	if _, err := e.Check(t.Context(), newIPVSLab(t, "ipvs", "wrr", 3, 1, 1).fakeLab); err == nil {
		t.Error("the check read IPVS from a lab without it")
	}
}
