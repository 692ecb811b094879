package lab

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/images"
	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
)

// conformanceMode is the one mode `make test` runs Kubernetes' conformance
// tests in: hybrid, svcproxy's default, whose ports start in the userspace
// proxier and are promoted into nftables while the tests run, so both paths
// meet the tests. `make conformance MODE=...` runs the others.
const conformanceMode = "hybrid"

// conformanceFocus is the [Conformance] part of scripts/conformance.sh's
// focus (34 specs): the Service, DNS, EndpointSlice and Networking
// conformance tests. The non-conformance Service tests of `make conformance`
// are left to it: they take twice as long, and the suite must stay well
// under 30 minutes on two cores (docs/conformance.md has the times).
const conformanceFocus = `\[sig-network\].*(Services|DNS|EndpointSlice|Networking).*\[Conformance\]`

// summaryLine is the line scripts/conformance.sh ends with.
var summaryLine = regexp.MustCompile(`(?m)^([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped$`)

// TestConformance runs Kubernetes' own conformance tests for Services, DNS,
// EndpointSlices and pod networking (e2e.test v1.37.2) against svcproxy and
// clusterdns on the lab's real node, through scripts/conformance.sh (`make
// conformance`), in conformanceMode. It needs what TestRealNode needs and
// e2e.test and agnhost (`make conformance-bins`); without them it skips and
// says so. It fails on any failed e2e test, and on a skipped one: none of the
// focused tests needs more than the lab's one node.
func TestConformance(t *testing.T) {
	netnstest.RequireRoot(t, append(lab.DemoTools, cluster.NodeTools...)...)
	bins := kapitest.ConformanceBinaries(t) // skips, with advice, without `make conformance-bins`
	bin := build(t)
	buildImages(t, bin, images.Config{Agnhost: bins.Agnhost}, images.All())
	t.Cleanup(func() { requireClean(t, bin) }) // the script brings the node down itself

	cmd := exec.Command("sh", "../../scripts/conformance.sh")
	cmd.Env = append(os.Environ(),
		"MODE="+conformanceMode,
		"NODES=1",
		"BIN="+bin,
		"FOCUS="+conformanceFocus,
		"SVCLAB_LOCK_HELD=1", // TestMain holds /run/lock/svclab-test.lock
	)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("make conformance MODE=%s FOCUS=<conformance only>, %s:\n%s", conformanceMode, time.Since(start).Round(time.Second), out)
	m := summaryLine.FindSubmatch(out)
	if m == nil {
		t.Fatalf("scripts/conformance.sh: %v, and no summary line: see %s/conformance-%s.log", err, bin, conformanceMode)
	}
	passed, _ := strconv.Atoi(string(m[1]))
	failed, _ := strconv.Atoi(string(m[2]))
	skipped, _ := strconv.Atoi(string(m[3]))
	if err != nil || failed > 0 || skipped > 0 || passed == 0 {
		t.Errorf("e2e: %s (exit: %v); the whole output is in %s/conformance-%s.log", m[0], err, bin, conformanceMode)
	}
}
