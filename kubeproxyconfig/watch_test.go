package kubeproxyconfig

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// wait runs fw.Wait in the background; the channel gets its result.
func wait(ctx context.Context, fw *FileWatch) <-chan error {
	done := make(chan error, 1)
	go func() { done <- fw.Wait(ctx) }()
	return done
}

// TestFileWatch: as kube-proxy, a write to the --config file or a rename of
// it ends the watch with ErrFileUpdated; a chmod does not; the end of ctx
// ends it with nil.
func TestFileWatch(t *testing.T) {
	for name, change := range map[string]func(file string) error{
		"write": func(file string) error {
			f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString("mode: nftables\n")
			return errors.Join(err, f.Close())
		},
		"rename": func(file string) error { return os.Rename(file, file+".old") },
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "config.conf")
			if err := os.WriteFile(file, []byte("kind: KubeProxyConfiguration\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			fw, err := WatchFile(file)
			if err != nil {
				t.Fatal(err)
			}
			done := wait(context.Background(), fw)
			if err := os.Chmod(file, 0o600); err != nil { // let pass
				t.Fatal(err)
			}
			if err := change(file); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, ErrFileUpdated) {
					t.Errorf("Wait after a %s: %v, want ErrFileUpdated", name, err)
				}
			case <-time.After(time.Minute):
				t.Fatalf("Wait did not return within a minute of a %s", name)
			}
		})
	}

	t.Run("end", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "config.conf")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		fw, err := WatchFile(file)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := wait(ctx, fw)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Wait after ctx ended: %v, want nil", err)
		}
	})

	t.Run("missing", func(t *testing.T) {
		if _, err := WatchFile(filepath.Join(t.TempDir(), "config.conf")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("WatchFile of a missing file: %v, want ErrNotExist", err)
		}
	})
}

// TestFileWatchConfigMap: a ConfigMap volume updated as the kubelet updates
// it (a new timestamped directory, the ..data symlink swapped by a rename,
// the old directory removed) does not end the watch, as it does not end
// kube-proxy's: the file watched is removed, not written. The new file is
// read at the next start.
func TestFileWatchConfigMap(t *testing.T) {
	dir := t.TempDir()
	volume := func(ts, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ts, "config.conf"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	volume("..2026_12_07_12_00_00.1", "mode: iptables\n")
	file := filepath.Join(dir, "config.conf")
	if err := os.Symlink("..data/config.conf", file); err != nil {
		t.Fatal(err)
	}
	fw, err := WatchFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := wait(ctx, fw)

	volume("..2026_12_07_12_01_00.2", "mode: nftables\n")
	if err := os.RemoveAll(filepath.Join(dir, "..2026_12_07_12_00_00.1")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "mode: nftables\n" {
		t.Fatalf("the volume's file after the update: %q %v", b, err)
	}
	// Give the kernel's events time to reach Wait before ctx ends: a Wait
	// that took them for an update would have returned by then.
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Wait after a ConfigMap update: %v, want nil (kube-proxy 1.37 does not restart on it either)", err)
	}
}
