package offloadtest

import (
	"fmt"
	"net"
	"testing"

	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// FirstSyncMovesUDP is the real-kernel check of a kernel mode's first-sync
// conntrack cleanup: a UDP flow that a process before it left pointing
// elsewhere is moved to a current endpoint by the first sync of a new process,
// as kube-proxy's reconciliation does. fresh makes a new Dataplane (a new
// process, as far as conntrack cleanup knows), runs its first sync, on Node,
// of a UDP Service 198.18.0.53:53 with eps (endpoints on port 5353, which
// ServeUDP serves), and returns its Health. Two flows are checked:
//
//   - one the userspace mode REDIRECTed to its own listener on the node
//     (here a server that answers "userspace"), whose portal went with it;
//   - one DNATed to an endpoint that was removed while no proxy ran (the
//     backend still answers: only the entry decides where the flow goes).
func (l *Lab) FirstSyncMovesUDP(t *testing.T, fresh func(eps []service.Endpoint) kernelsync.Health) {
	t.Helper()
	l.ServeUDP(t, 5353)
	var pc net.PacketConn
	if err := l.Node.Do(func() (err error) {
		pc, err = net.ListenPacket("udp4", ":10053")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go udpIdentServer(pc, "userspace")
	portal := []string{"PREROUTING", "-d", "198.18.0.53", "-p", "udp", "--dport", "53", "-j", "REDIRECT", "--to-ports", "10053"}
	l.Node.Run(t, "iptables", append([]string{"-t", "nat", "-A"}, portal...)...)

	c := NewUDPClient(t, l.Client, "198.18.0.53:53")
	if got, err := c.Ask(); err != nil || got != "userspace" {
		t.Fatalf("through the portal: %q, %v; want the userspace listener's answer", got, err)
	}
	l.Node.Run(t, "iptables", append([]string{"-t", "nat", "-D"}, portal...)...)
	check := func(h kernelsync.Health) {
		t.Helper()
		if h.ConntrackDeleted == 0 || h.ConntrackErrors != 0 {
			t.Errorf("health %+v: want conntrack entries deleted without errors", h)
		}
	}
	check(fresh(l.Endpoints(5353)))
	first, err := c.Ask()
	if err != nil {
		t.Fatal(err)
	}
	if first == "userspace" {
		t.Fatal("after the first sync, the flow still goes to the portal's listener (its conntrack entry was not deleted)")
	}

	var keep []service.Endpoint
	for i, e := range l.Endpoints(5353) {
		if first != fmt.Sprintf("b%d", i) {
			keep = append(keep, e)
		}
	}
	check(fresh(keep)) // the removed backend still runs: only conntrack moves the flow
	got, err := c.Ask()
	if err != nil {
		t.Fatal(err)
	}
	if got == first {
		t.Errorf("after a new process's first sync without %s, the flow still goes there (conntrack entry not deleted)", first)
	}
}
