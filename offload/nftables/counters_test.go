package nftables

import (
	"testing"

	"github.com/svcproxy/svcproxy/internal/ruletest"
)

// A sync that rewrites a port's chains (a full sync rewrites them all) must
// not reset the count hybrid's promoter reads (internal/ruletest): the named
// counter outlives them.
func TestConnectionsSurviveSyncs(t *testing.T) { ruletest.CheckConnections(t, rules) }
