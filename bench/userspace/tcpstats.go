package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// troubleCounters are the TCP counters that tell that a row measured the
// kernel's timers rather than the path: SYNs sent again (a dropped SYN is
// sent again only after a second), retransmission timeouts, segments sent
// again, SYNs that a socket in TIME_WAIT refused (PAWS: the SYN's timestamp
// is older than the last one that socket saw, as after a NAT to an address
// and port still in TIME_WAIT), and connections a full accept queue dropped.
var troubleCounters = []string{
	"TcpExtTCPSynRetrans", "TcpExtTCPTimeouts", "TcpRetransSegs",
	"TcpExtPAWSTimewait", "TcpExtListenOverflows", "TcpExtListenDrops",
}

// tcpCounters are a namespace's troubleCounters.
type tcpCounters map[string]int64

// readTCPCounters runs nstat (iproute2; -a: absolute values, -s: leave its
// history file alone, -z: zeros too) as cmd says, in the node namespace or,
// through the client's command, in the client's.
func readTCPCounters(cmd *exec.Cmd) (tcpCounters, error) {
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("nstat: %w", err)
	}
	c := tcpCounters{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		for _, name := range troubleCounters {
			if f[0] == name {
				c[name], _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	return c, nil
}

// bothCounters reads the counters of the client's namespace and the node's.
func bothCounters(client *namespace) (cl, node tcpCounters, err error) {
	if cl, err = readTCPCounters(client.command(context.Background(), "nstat", "-asz")); err != nil {
		return nil, nil, err
	}
	node, err = readTCPCounters(exec.Command("nstat", "-asz"))
	return cl, node, err
}

// tcpTrouble says which troubleCounters grew between two readings of both
// namespaces; "" when none did.
func tcpTrouble(cl0, node0, cl1, node1 tcpCounters) string {
	var s []string
	for _, side := range []struct {
		name          string
		before, after tcpCounters
	}{{"client", cl0, cl1}, {"node", node0, node1}} {
		for _, name := range troubleCounters {
			if d := side.after[name] - side.before[name]; d != 0 {
				s = append(s, fmt.Sprintf("%s %s %d", side.name, name, d))
			}
		}
	}
	return strings.Join(s, ", ")
}
