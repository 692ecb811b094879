package exercise

import (
	"strings"
	"testing"
)

func TestWebEightRules(t *testing.T) {
	rules := func(mode string, n int) kernelLab {
		save := "*nat\n:SVCP-SVC-CDGGSHYLG3RE2FKL - [0:0]\n" + strings.Repeat(`-A SVCP-SVC-CDGGSHYLG3RE2FKL -m comment --comment "default/web:http -> 198.19.1.10:8080" -j SVCP-SEP-X`+"\n", n) +
			`-A SVCP-SERVICES -d 198.18.0.21/32 -p tcp -m comment --comment "default/web-sticky:http cluster IP" -j SVCP-SVC-Y` + "\nCOMMIT\n"
		return kernelLab{fakeLab: lab(mode, "not ready", mode), out: map[string]string{"node iptables-save -t nat": save}}
	}
	want(t, "eight", check(t, "09", rules("iptables", 8)), true, "")
	want(t, "eleven", check(t, "09", rules("iptables", 11)), false, "Take one pod out")
	want(t, "five", check(t, "09", rules("iptables", 5)), false, "ready again")
	want(t, "nftables", check(t, "09", rules("nftables", 8)), false, "svclab mode iptables")
}
