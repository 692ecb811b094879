package iptables

import (
	"os"
	"strconv"
	"testing"
)

// TestWriteRules writes the rules of Cluster($SVCP_PORTS) to $SVCP_RULES_OUT, to
// time iptables-restore by hand. Skipped unless both are set.
func TestWriteRules(t *testing.T) {
	out, n := os.Getenv("SVCP_RULES_OUT"), os.Getenv("SVCP_PORTS")
	if out == "" || n == "" {
		t.Skip("set SVCP_RULES_OUT and SVCP_PORTS")
	}
	ports, err := strconv.Atoi(n)
	if err != nil {
		t.Fatal(err)
	}
	text, err := offloadRender(ports)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, text, 0o644); err != nil {
		t.Fatal(err)
	}
}
