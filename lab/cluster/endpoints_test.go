package cluster

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// Turning a pod not ready, then terminating, rewrites its endpoint in every
// slice, keeps the file's comments, and the Snapshot svcproxy builds from it
// says so.
func TestSetConditions(t *testing.T) {
	out, n, changed, err := setConditions(Manifests, "web-1", "198.19.1.11", Conditions{})
	require.NoError(t, err)
	require.Equal(t, 7, n, "web-1 is behind web, web-sticky, echo, web-nodeport, web-local, and web-dual (a slice per family)")
	require.Equal(t, 7, changed, "every one was ready")
	require.Contains(t, string(out), "# web: three pods behind one virtual address")
	require.Contains(t, string(out), "conditions: {ready: false, serving: false}")

	snap, err := watch.SnapshotOf("services.yaml", out)
	require.NoError(t, err)
	web, _ := snap.Port(service.PortName{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"}, Port: "http", Protocol: service.TCP})
	require.Equal(t, "[198.19.1.10:8080 198.19.1.12:8080]", fmtEndpoints(web.Categorize("", nil).Cluster), "usable")

	again, _, changed, err := setConditions(out, "web-1", "198.19.1.11", Conditions{})
	require.NoError(t, err)
	require.Zero(t, changed, "not ready twice: nothing for svcproxy to apply")
	require.Equal(t, string(out), string(again))

	out, _, _, err = setConditions(out, "web-1", "198.19.1.11", Conditions{Serving: true, Terminating: true})
	require.NoError(t, err)
	require.Contains(t, string(out), "conditions: {ready: false, serving: true, terminating: true}")
	out, _, _, err = setConditions(out, "web-1", "198.19.1.11", Conditions{Ready: true, Serving: true})
	require.NoError(t, err)
	snap, err = watch.SnapshotOf("services.yaml", out)
	require.NoError(t, err)
	web, _ = snap.Port(web.Name)
	require.Len(t, web.Categorize("", nil).Cluster, 3)
}

func fmtEndpoints(eps []service.Endpoint) string {
	var s []string
	for _, e := range eps {
		s = append(s, e.String())
	}
	return "[" + strings.Join(s, " ") + "]"
}
