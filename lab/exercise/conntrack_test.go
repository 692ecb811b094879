package exercise

import (
	"testing"

	"github.com/svcproxy/svcproxy/lab/views"
)

func entry(src, dst, means string) views.ConntrackEntry {
	return views.ConntrackEntry{Proto: "tcp", State: "TIME_WAIT", Sent: [2]string{src, dst}, Means: means}
}

var (
	dnat      = entry("198.19.1.2:41000", "198.18.0.20:80", "DNAT to 198.19.1.10 (web-0)")
	redirect  = entry("198.19.1.2:41000", "198.18.0.20:80", "REDIRECT to svcproxy's listener :39215 (userspace: the first connection)")
	own       = entry("198.19.0.1:35006", "198.19.1.11:8080", "svcproxy's own connection to 198.19.1.11 (web-1) (userspace: the second connection)")
	rewritten = entry("198.19.1.2:41000", "198.19.1.12:8080", "no rewrite: sent to 198.19.1.12 (web-2) itself (socklb: connect() was rewritten in the socket)")
)

func TestOneDNATEntry(t *testing.T) {
	for _, tt := range []struct {
		what    string
		entries []views.ConntrackEntry
		done    bool
		hint    string
	}{
		{"one DNAT", []views.ConntrackEntry{dnat}, true, ""},
		{"userspace", []views.ConntrackEntry{redirect, own}, false, "two connections"},
		{"none", nil, false, "send one request"},
		{"two DNATs", []views.ConntrackEntry{dnat, dnat}, false, "--flush"},
		{"socklb", []views.ConntrackEntry{rewritten}, false, "no DNAT"},
	} {
		r := check(t, "02", kernelLab{fakeLab: lab("iptables", "ready", "iptables"), entries: tt.entries})
		want(t, tt.what, r, tt.done, tt.hint)
	}
	many := entriesWords([]views.ConntrackEntry{redirect, own, redirect, own})
	if many != "conntrack holds 4 entries for web: 2 REDIRECTed to svcproxy, 2 svcproxy's own" {
		t.Errorf("four userspace entries in words: %q", many)
	}
}

func TestSocketLBMissed(t *testing.T) {
	outside := entry("198.19.200.2:41000", "198.18.0.20:80", "DNAT to 198.19.1.10 (web-0), MASQUERADE: the pod saw 198.19.0.1 (node)")
	for _, tt := range []struct {
		what, mode string
		entries    []views.ConntrackEntry
		done       bool
		hint       string
	}{
		{"from outside", "socklb", []views.ConntrackEntry{rewritten, outside}, true, ""},
		{"all rewritten", "socklb", []views.ConntrackEntry{rewritten, rewritten, rewritten}, false, "Who the hook sees"},
		{"nftables mode", "nftables", []views.ConntrackEntry{dnat}, false, "svclab mode socklb"},
	} {
		r := check(t, "12", kernelLab{fakeLab: lab(tt.mode, "ready", tt.mode), entries: tt.entries})
		want(t, tt.what, r, tt.done, tt.hint)
	}
}
