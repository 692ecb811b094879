package exercise

import (
	"testing"

	"github.com/svcproxy/svcproxy/lab/views"
)

// localLab is web-local behind web-0 and web-1, traced from outside with
// the given ways.
func localLab(mode string, ways ...string) kernelLab {
	eps := []views.EndpointView{
		{Addr: "198.19.1.10:8080", Pod: "web-0", Ready: true, Serving: true},
		{Addr: "198.19.1.11:8080", Pod: "web-1", Ready: true, Serving: true},
		{Addr: "198.19.1.12:8080", Pod: "web-2", Ready: true, Serving: true},
	}
	k := kernelLab{fakeLab: fakeLab{&views.ServicesView{Mode: mode, Ports: []views.ServicePortView{{Name: "default/web-local:http", Path: mode, Endpoints: eps}}}}}
	for _, w := range ways {
		k.trace.Ways = append(k.trace.Ways, views.TraceWay{Result: w, P: 1 / float64(len(ways))})
	}
	return k
}

func TestLocalOnlyWeb1(t *testing.T) {
	for _, tt := range []struct {
		what string
		lab  kernelLab
		done bool
		hint string
	}{
		{"web-1 alone", localLab("iptables", "DNAT 198.19.1.11:8080"), true, ""},
		{"web-0 and web-1", localLab("iptables", "DNAT 198.19.1.10:8080 (web-0)", "DNAT 198.19.1.11:8080 (web-1)"), false, "which of them is not web-1"},
		{"web-0 alone", localLab("nftables", "DNAT 198.19.1.10:8080"), false, "which of them is not web-1"},
		{"policy Cluster", localLab("iptables", "DNAT 198.19.1.11:8080, MASQUERADE"), false, "must stay Local"},
		{"none ready", localLab("iptables", "DROP"), false, "keep web-1 ready"},
		{"userspace", localLab("userspace", "REDIRECT :39215"), false, "svclab mode iptables"},
	} {
		r := check(t, "04", tt.lab)
		want(t, tt.what, r, tt.done, tt.hint)
	}
}
