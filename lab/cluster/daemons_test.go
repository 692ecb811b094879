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
	err := d.SetModeWith(context.Background(), ModeOptions{Mode: "ipvs", IPVSScheduler: "fifo"})
	if err == nil || !strings.Contains(err.Error(), `IPVS scheduler "fifo"`) {
		t.Fatalf("SetModeWith(ipvs, fifo) = %v, want an error naming the scheduler", err)
	}
}
