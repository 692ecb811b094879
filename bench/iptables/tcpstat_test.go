package iptables

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// tcpStats are the client namespace's TCP counters that tell a stalled connection
// from a slow one: a SYN that gets no answer (or a wrong one) costs a 1 s
// retransmission timeout (RFC 6298's initial RTO), hundreds of times a connection.
type tcpStats struct {
	SynRetrans  int64 // TcpExt TCPSynRetrans: SYNs sent again
	RetransSegs int64 // Tcp RetransSegs: all segments sent again
	OutRsts     int64 // Tcp OutRsts: resets sent
}

func (s tcpStats) sub(o tcpStats) tcpStats {
	return tcpStats{s.SynRetrans - o.SynRetrans, s.RetransSegs - o.RetransSegs, s.OutRsts - o.OutRsts}
}

// readTCPStats reads ns's counters. /proc/thread-self/net is the network namespace of
// the calling thread, which Do has moved into ns (/proc/net follows the process's).
func readTCPStats(ns *netnstest.NS) (tcpStats, error) {
	var s tcpStats
	err := ns.Do(func() error {
		snmp, err := procCounters("/proc/thread-self/net/snmp", "Tcp")
		if err != nil {
			return err
		}
		ext, err := procCounters("/proc/thread-self/net/netstat", "TcpExt")
		if err != nil {
			return err
		}
		s = tcpStats{SynRetrans: ext["TCPSynRetrans"], RetransSegs: snmp["RetransSegs"], OutRsts: snmp["OutRsts"]}
		return nil
	})
	return s, err
}

// procCounters parses the "Prefix: name name ..." / "Prefix: value value ..." line
// pair of /proc/net/snmp or /proc/net/netstat.
func procCounters(path, prefix string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tcp counters: %w", err)
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != prefix+":" {
			continue
		}
		if names == nil {
			names = fields[1:]
			continue
		}
		m := make(map[string]int64, len(names))
		for i, v := range fields[1:] {
			if i < len(names) {
				m[names[i]], _ = strconv.ParseInt(v, 10, 64) // MaxConn is -1: still parses
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("%s: no %q counters", path, prefix)
}

func TestProcCounters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snmp")
	text := "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm MaxConn RetransSegs OutRsts\nTcp: 1 -1 7 3\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := procCounters(path, "Tcp")
	if err != nil {
		t.Fatal(err)
	}
	if got["RetransSegs"] != 7 || got["OutRsts"] != 3 || got["MaxConn"] != -1 {
		t.Errorf("procCounters = %v, want RetransSegs 7, OutRsts 3, MaxConn -1", got)
	}
	if _, err := procCounters(path, "TcpExt"); err == nil {
		t.Error("procCounters(TcpExt) on a file without it: want an error")
	}
}
