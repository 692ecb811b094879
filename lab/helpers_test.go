package lab

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// loadManifests builds the Snapshot that svcproxy and clusterdns see.
func loadManifests(t *testing.T) *service.Snapshot {
	t.Helper()
	objs, err := watch.LoadManifests("manifests.yaml", cluster.Manifests)
	require.NoError(t, err)
	var svcs []*v1.Service
	var slices []*discoveryv1.EndpointSlice
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.Service:
			svcs = append(svcs, o)
		case *discoveryv1.EndpointSlice:
			slices = append(slices, o)
		default:
			t.Fatalf("manifests.yaml: unexpected %T", o)
		}
	}
	snap := service.Build(svcs, slices, nil)
	require.Empty(t, snap.Errors())
	return snap
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./lab -update to create it")
	require.Equal(t, string(want), got)
}
