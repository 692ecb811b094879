package views

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/service/watch"
)

// loadManifests builds the Snapshot that svcproxy and clusterdns see, as
// svcproxy reads the manifests file (cluster's tests check the file).
func loadManifests(t *testing.T) *service.Snapshot {
	t.Helper()
	snap, err := watch.SnapshotOf("manifests.yaml", cluster.Manifests)
	require.NoError(t, err)
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
