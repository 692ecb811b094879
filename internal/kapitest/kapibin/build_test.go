package kapibin

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRequiredVersion(t *testing.T) {
	gomod := []byte(`module example.com/m

go 1.26.0

require k8s.io/kubernetes v1.37.2

require (
	go.etcd.io/etcd/server/v3 v3.6.16
	k8s.io/api v0.0.0 // indirect
)

replace k8s.io/api => k8s.io/api v0.37.2
`)
	tests := []struct {
		dep, want, err string
	}{
		{dep: "k8s.io/kubernetes", want: "v1.37.2"},
		{dep: "go.etcd.io/etcd/server/v3", want: "v3.6.16"},
		{dep: "k8s.io/api", want: "v0.0.0"},
		{dep: "k8s.io/client-go", err: "require k8s.io/client-go: not found"},
	}
	for _, tt := range tests {
		got, err := requiredVersion(gomod, tt.dep)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("requiredVersion(%s) = %q, %v; want error %q", tt.dep, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("requiredVersion(%s) = %q, %v; want %q", tt.dep, got, err, tt.want)
		}
	}
}

func TestKubeLDFlags(t *testing.T) {
	got := kubeLDFlags("v1.37.2")
	for _, want := range []string{".gitVersion=v1.37.2", ".gitMajor=1 ", ".gitMinor=37 "} {
		if !strings.Contains(got, want) {
			t.Errorf("kubeLDFlags(v1.37.2) = %q, want it to contain %q", got, want)
		}
	}
}

// TestBuildCached checks the repository's own pins produce a key named by
// their versions, and that a complete cache directory is used as it is:
// nothing is built, so this runs in milliseconds.
func TestBuildCached(t *testing.T) {
	cache := t.TempDir()
	key, versions, err := cacheKey(filepath.Join("..", "..", "..", "test", "kapi"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "kube-apiserver-"+versions["k8s.io/kubernetes"]+"_etcd-"+versions["go.etcd.io/etcd/server/v3"]+"_") {
		t.Errorf("cache key %q does not name the versions %v", key, versions)
	}
	dir := filepath.Join(cache, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bins, err := Build(context.Background(), Config{CacheDir: cache})
	if err != nil {
		t.Fatalf("Build with a complete cache: %v", err)
	}
	want := Binaries{APIServer: filepath.Join(dir, "kube-apiserver"), Etcd: filepath.Join(dir, "etcd"), Key: key}
	if bins != want {
		t.Errorf("Build = %+v, want %+v", bins, want)
	}
}

// TestLock checks that a second locker waits and gives up with its context.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.lock")
	unlock, err := lock(context.Background(), path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// flock locks belong to the open file description, so a second open in
	// the same process conflicts just as another process would.
	if _, err := lock(ctx, path, io.Discard); err == nil {
		t.Fatal("second lock while held: got nil error, want context canceled")
	}
	unlock()
	unlock2, err := lock(context.Background(), path, io.Discard)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}
