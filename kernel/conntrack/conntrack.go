package conntrack

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// Interface deletes conntrack entries.
type Interface interface {
	// Delete removes every entry that matches f and returns how many it removed.
	// No match is not an error.
	Delete(ctx context.Context, f Filter) (int, error)
}

// Filter selects entries. Zero fields match anything; Protocol is required.
type Filter struct {
	// Protocol is "udp", "tcp" or "sctp".
	Protocol string
	// OrigDst and OrigDstPort are the destination the client sent to: a ClusterIP,
	// an external IP, a node address (conntrack --orig-dst, --orig-port-dst).
	OrigDst     netip.Addr
	OrigDstPort uint16
	// DstNAT is the address the entry was DNATed to: the endpoint (conntrack
	// --dst-nat; the reply's source).
	DstNAT netip.Addr
}

func (f Filter) String() string {
	return strings.Join(f.args(), " ")
}

func (f Filter) args() []string {
	a := []string{"-p", f.Protocol}
	if f.OrigDst.IsValid() {
		a = append(a, "--orig-dst", f.OrigDst.String())
	}
	if f.OrigDstPort != 0 {
		a = append(a, "--orig-port-dst", strconv.Itoa(int(f.OrigDstPort)))
	}
	if f.DstNAT.IsValid() {
		a = append(a, "--dst-nat", f.DstNAT.String())
	}
	return a
}

func (f Filter) validate() error {
	switch f.Protocol {
	case "udp", "tcp", "sctp":
		return nil
	}
	return fmt.Errorf("conntrack filter: protocol %q: want udp, tcp or sctp", f.Protocol)
}

// Real runs conntrack(8).
type Real struct {
	// Command makes the command to run; nil means exec.CommandContext. Tests pass
	// a netnstest NS's Command to run it inside their namespace.
	Command func(ctx context.Context, name string, args ...string) *exec.Cmd
}

var _ Interface = (*Real)(nil)

// conntrack -D prints "conntrack v1.4.7 (conntrack-tools): 3 flow entries have been
// deleted." on stderr, and exits 1 when the count is 0 (kube-proxy matches the same
// text, pkg/util/conntrack).
var deletedRE = regexp.MustCompile(`(\d+) flow entries have been deleted`)

// Delete implements Interface.
func (r *Real) Delete(ctx context.Context, f Filter) (int, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	cmd := r.Command
	if cmd == nil {
		cmd = exec.CommandContext
	}
	out, err := cmd(ctx, "conntrack", append([]string{"-D"}, f.args()...)...).CombinedOutput()
	m := deletedRE.FindSubmatch(out)
	if m != nil {
		n, _ := strconv.Atoi(string(m[1]))
		return n, nil // exit status 1 with "0 flow entries" is no match, not a failure
	}
	if err == nil {
		err = errors.New("no count in output")
	}
	return 0, fmt.Errorf("conntrack -D %s: %w: %s", f, err, strings.TrimSpace(string(out)))
}
