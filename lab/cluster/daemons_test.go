package cluster

import (
	"context"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/lab/topology"
)

func TestSetModeWithRejectsUnknownScheduler(t *testing.T) {
	net := topology.New(topology.Config{StateDir: t.TempDir()})
	d := New(Config{Net: net}).Daemons()
	_, err := d.SetModeWith(context.Background(), ModeOptions{Mode: "ipvs", IPVSScheduler: "fifo"})
	if err == nil || !strings.Contains(err.Error(), `IPVS scheduler "fifo"`) {
		t.Fatalf("SetModeWith(ipvs, fifo) = %v, want an error naming the scheduler", err)
	}
}

// The control-plane lab's ConfigMap says what svcproxy runs with, and that
// nothing reads it.
func TestLabConfigMapPatch(t *testing.T) {
	b, err := labConfigMapPatch("userspace", "", "198.19.0.0/17,2001:db8:19::/104")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"data":{"cluster-cidr":"198.19.0.0/17,2001:db8:19::/104","mode":"userspace","offload":"nftables"},"metadata":{"annotations":{"svclab.svcproxy.io/not-read":"` + labConfigMapWhy + `"}}}`
	if string(b) != want {
		t.Errorf("patch:\n%s\nwant\n%s", b, want)
	}
}
