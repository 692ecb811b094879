package exercise

import (
	"context"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/lab/views"
)

type fakeLab struct{ v *views.ServicesView }

func (f fakeLab) Services(context.Context) (*views.ServicesView, error) { return f.v, nil }

// lab is the lab's web and web-sticky in mode, web-1 as web1 says
// ("ready", "not ready", "terminating", "gone"), web-sticky on path.
func lab(mode, web1, sticky string) fakeLab {
	eps := []views.EndpointView{{Addr: "198.19.1.10:8080", Pod: "web-0", Ready: true, Serving: true}}
	switch web1 {
	case "ready":
		eps = append(eps, views.EndpointView{Addr: "198.19.1.11:8080", Pod: "web-1", Ready: true, Serving: true})
	case "not ready":
		eps = append(eps, views.EndpointView{Addr: "198.19.1.11:8080", Pod: "web-1"})
	case "terminating":
		eps = append(eps, views.EndpointView{Addr: "198.19.1.11:8080", Pod: "web-1", Serving: true, Terminating: true})
	}
	eps = append(eps, views.EndpointView{Addr: "198.19.1.12:8080", Pod: "web-2", Ready: true, Serving: true})
	webPath := mode
	if mode == "hybrid" {
		webPath = "nftables"
	}
	return fakeLab{&views.ServicesView{Mode: mode, Ports: []views.ServicePortView{
		{Name: "default/web:http", Path: webPath, Endpoints: eps},
		{Name: "default/web-sticky:http", Path: sticky, Endpoints: eps},
	}}}
}

// Each exercise's check against a lab where it was done and labs where it
// was not: each of those says what it saw and gives a hint.
func TestChecks(t *testing.T) {
	tests := []struct {
		tutorial string
		lab      fakeLab
		done     bool
		hint     string
	}{
		{"01", lab("userspace", "ready", "userspace"), true, ""},
		{"01", lab("iptables", "ready", "iptables"), false, "second connection"},
		{"03", lab("userspace", "not ready", "userspace"), true, ""},
		{"03", lab("userspace", "ready", "userspace"), false, "which condition"},
		{"03", lab("userspace", "terminating", "userspace"), false, "terminating endpoint still serves"},
		{"03", lab("userspace", "gone", "userspace"), false, "svclab pod web-1 --start"},
		{"08", lab("hybrid", "ready", "nftables"), true, ""},
		{"08", lab("hybrid", "ready", "userspace"), false, "svclab traffic --rate"},
		{"08", lab("iptables", "ready", "iptables"), false, "svclab mode hybrid"},
	}
	for _, tt := range tests {
		e, err := Find(tt.tutorial)
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.Check(t.Context(), tt.lab)
		if err != nil {
			t.Fatal(err)
		}
		if r.Done != tt.done || r.Saw == "" || !strings.Contains(r.Hint, tt.hint) || (r.Done && r.Hint != "") {
			t.Errorf("tutorial %s on %+v: %+v; want done %v with a hint containing %q", tt.tutorial, tt.lab.v.Ports[0].Endpoints, r, tt.done, tt.hint)
		}
	}
}

// web-dual's endpoints in both families, web-2's as v4 and v6 say.
func dualLab(v4, v6 string) fakeLab {
	var eps []views.EndpointView
	for _, fam := range []struct{ prefix, state string }{{"198.19.1.", v4}, {"[2001:db8:19::1:", v6}} {
		end := ":8080"
		if fam.prefix[0] == '[' {
			end = "]:8080"
		}
		eps = append(eps,
			views.EndpointView{Addr: fam.prefix + "10" + end, Pod: "web-0", Ready: true, Serving: true},
			views.EndpointView{Addr: fam.prefix + "11" + end, Pod: "web-1", Ready: true, Serving: true},
			views.EndpointView{Addr: fam.prefix + "12" + end, Pod: "web-2", Ready: fam.state == "ready", Serving: fam.state == "ready"})
	}
	return fakeLab{&views.ServicesView{Mode: "userspace", Ports: []views.ServicePortView{{Name: "default/web-dual:http", Path: "userspace", Endpoints: eps}}}}
}

func TestDualStackCheck(t *testing.T) {
	e, err := Find("10")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		v4, v6 string
		done   bool
		hint   string
	}{
		{"not ready", "not ready", true, ""},
		{"ready", "ready", false, "ready in both families"},
		{"not ready", "ready", false, "one family only"},
	} {
		r, err := e.Check(t.Context(), dualLab(tt.v4, tt.v6))
		if err != nil {
			t.Fatal(err)
		}
		if r.Done != tt.done || !strings.Contains(r.Hint, tt.hint) || !strings.Contains(r.Saw, "IPv6 web-2") {
			t.Errorf("web-2 %s in IPv4, %s in IPv6: %+v; want done %v, a hint containing %q", tt.v4, tt.v6, r, tt.done, tt.hint)
		}
	}
}

func TestFindNames(t *testing.T) {
	_, err := Find("99")
	if err == nil {
		t.Fatal("Find(99) found an exercise")
	}
	for _, e := range Exercises {
		if !strings.Contains(err.Error(), e.Tutorial) {
			t.Errorf("Find(99) = %v, want an error listing the tutorials with an exercise, %s among them", err, e.Tutorial)
		}
	}
}
