package exercise

import (
	"strings"
	"testing"
)

const nftSticky = `table ip svcproxy {
	set affinity-7RK3ZMUN-default/web-sticky/tcp/http__198.19.1.10/8080 {
		type ipv4_addr
		flags dynamic,timeout
		timeout 10m
		elements = { 198.19.1.2 expires 9m58s }
	}
	set affinity-2PWLHUYF-default/web-sticky/tcp/http__198.19.1.11/8080 {
		type ipv4_addr
		flags dynamic,timeout
		timeout 10m
%s	}
	set affinity-ABCDEFGH-default/web/tcp/http__198.19.1.12/8080 {
		elements = { 198.19.1.30 expires 1m }
	}
}
`

const saveSticky = `*nat
-A SVCP-SEP-7RK3ZMUNCISJTK6S -p tcp -m comment --comment "default/web-sticky:http" -m recent --set --name SVCP-SEP-7RK3ZMUNCISJTK6S --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 198.19.1.10:8080
-A SVCP-SEP-2PWLHUYF3QFGNEAF -p tcp -m comment --comment "default/web-sticky:http" -m recent --set --name SVCP-SEP-2PWLHUYF3QFGNEAF --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 198.19.1.11:8080
COMMIT
`

func TestTwoStickyClients(t *testing.T) {
	nft := func(second string) kernelLab {
		k := kernelLab{fakeLab: lab("nftables", "ready", "nftables")}
		k.out = map[string]string{"node nft list table ip svcproxy": strings.Replace(nftSticky, "%s", second, 1)}
		return k
	}
	ipt := func(second string) kernelLab {
		k := kernelLab{fakeLab: lab("iptables", "ready", "iptables")}
		k.out = map[string]string{"node iptables-save -t nat": saveSticky,
			"node cat /proc/net/xt_recent/SVCP-SEP-7RK3ZMUNCISJTK6S": "src=198.19.1.2 ttl: 64 last_seen: 4295 oldest_pkt: 3 4295, 4295, 4295\n",
			"node cat /proc/net/xt_recent/SVCP-SEP-2PWLHUYF3QFGNEAF": second}
		return k
	}
	for _, tt := range []struct {
		what string
		lab  kernelLab
		done bool
		hint string
	}{
		{"nftables, two clients", nft("\t\telements = { 198.19.1.20 expires 9m59s }\n"), true, ""},
		{"nftables, one client", nft(""), false, "from another host"},
		{"iptables, two clients", ipt("src=198.19.1.20 ttl: 64 last_seen: 4296 oldest_pkt: 1 4296\n"), true, ""},
		{"iptables, one client", ipt(""), false, "from another host"},
		{"userspace", kernelLab{fakeLab: lab("userspace", "ready", "userspace")}, false, "svclab mode nftables"},
	} {
		r := check(t, "05", tt.lab)
		want(t, tt.what, r, tt.done, tt.hint)
		if tt.done && !strings.Contains(r.Saw, "198.19.1.20 -> web-1") {
			t.Errorf("%s: %q, want the second client and its pod named", tt.what, r.Saw)
		}
	}
}
