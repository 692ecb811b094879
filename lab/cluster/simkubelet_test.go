package cluster

import (
	"strings"
	"testing"
)

func TestPodHost(t *testing.T) {
	tests := []struct{ ns, name, host, link string }{
		{"default", "web-3", "web-3", "veth-web-3"},
		{"default", "web-12", "web-12", "veth-web-12"},
		{"shop", "cart-0", "cart-0.shop", "veth"},
		{"default", "frontend-7d9c5b-x2x8q", "frontend-7d9c5b-x2x8q", "veth"},
	}
	for _, tt := range tests {
		host := podHostName(tt.ns, tt.name)
		link := nodeLinkName(host)
		if host != tt.host || !strings.HasPrefix(link, tt.link) || len(link) > 15 {
			t.Errorf("pod %s/%s: host %q link %q, want host %q and a link of at most 15 bytes starting %q", tt.ns, tt.name, host, link, tt.host, tt.link)
		}
	}
}
