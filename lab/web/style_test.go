package web

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each tracer a trace's hops can name (views.TraceHop's Tracer) has a colour
// of its own on the page's hops, set in style.css as `.hop.TRACER` (app.js
// gives each hop the class of its tracer): none left with the plain hop's
// colour, which is the start of the trace, and no two alike, so that a
// trace that goes from the socket LB on to the node's rules shows where one
// path hands over to the other.
func TestTraceHopStyles(t *testing.T) {
	css, err := static.ReadFile("static/style.css")
	require.NoError(t, err)
	plain := regexp.MustCompile(`\.hop \{[^}]*border-left: [^;]* (#[0-9a-fA-F]+);`).FindSubmatch(css)
	require.NotNil(t, plain, "style.css: no border-left colour for .hop")
	colours := map[string]string{} // tracer -> colour
	for _, m := range regexp.MustCompile(`\.hop\.(\w+) \{ border-left-color: (#[0-9a-fA-F]+); \}`).FindAllSubmatch(css, -1) {
		colours[string(m[1])] = strings.ToLower(string(m[2]))
	}
	seen := map[string]string{strings.ToLower(string(plain[1])): "the plain .hop (the trace's start)"}
	// The tracers lab's TraceReport uses: lab/trace.go and lab/socklbtrace.go.
	for _, tracer := range []string{"iptables", "nftables", "IPVS", "socklb"} {
		c, ok := colours[tracer]
		if !ok {
			t.Errorf("style.css: no .hop.%s { border-left-color: ... } for the %s tracer's hops", tracer, tracer)
			continue
		}
		if other, dup := seen[c]; dup {
			t.Errorf("style.css: .hop.%s has %s, the colour of %s", tracer, c, other)
		}
		seen[c] = ".hop." + tracer
	}
}
