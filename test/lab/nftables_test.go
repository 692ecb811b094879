package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/lab"
)

// svclab up --mode nftables runs svcproxy on the nftables path, and svclab rules
// shows its table: the lab's Services in service-ips.
func TestModeNFTables(t *testing.T) {
	netnstest.RequireRoot(t, append(lab.DemoTools, "nft")...)
	bin := build(t)
	t.Cleanup(func() { down(t, bin) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := svclab(ctx, bin, "up", "--mode", "nftables"); err != nil {
		t.Fatalf("svclab up --mode nftables: %v\n%s", err, out)
	}
	var out string
	for ctx.Err() == nil { // svcproxy's first sync comes shortly after up returns
		var err error
		if out, err = svclab(ctx, bin, "rules"); err != nil {
			t.Fatalf("svclab rules: %v\n%s", err, out)
		}
		if strings.Contains(out, "map service-ips") && strings.Contains(out, " . tcp . 80 ") {
			break
		}
		time.Sleep(200 * time.Millisecond) // polls svcproxy's first sync; asserts nothing about time
	}
	if !strings.Contains(out, "# nftables (nft list table ip svcproxy)") || !strings.Contains(out, " . tcp . 80 ") {
		t.Fatalf("svclab rules: want the nftables table with the lab's Services:\n%s", out)
	}
	t.Logf("svclab rules:\n%s", out)
}
