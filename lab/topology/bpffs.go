package topology

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// BPFFS is the bpffs the lab mounts on a directory of its own
// (/run/svclab-bpf), where svcproxy pins the socket LB's maps and the
// programs' links (--socklb-pin-path), as Cilium pins under /sys/fs/bpf: a
// restart of svcproxy adopts them, and svclab opens them read-only to show
// them. Up mounts it, Down unmounts it, which drops whatever a crashed
// svcproxy left pinned.
type BPFFS struct {
	stateDir string
}

// Dir is where the lab mounts its bpffs: beside the state directory, as the
// cgroup2 mount.
func (b *BPFFS) Dir() string { return filepath.Clean(b.stateDir) + "-bpf" }

// SocketLBPinPath is svcproxy's --socklb-pin-path in the lab.
func (b *BPFFS) SocketLBPinPath() string { return filepath.Join(b.Dir(), "svcproxy") }

// mounted says whether the lab's bpffs is mounted.
func (b *BPFFS) mounted() bool {
	var fs unix.Statfs_t
	return unix.Statfs(b.Dir(), &fs) == nil && fs.Type == unix.BPF_FS_MAGIC
}

// Mount mounts a bpffs on Dir, unless it is there already.
func (b *BPFFS) Mount() error {
	if b.mounted() {
		return nil
	}
	dir := b.Dir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs on %s: %w", dir, err)
	}
	return nil
}

// Unmount unmounts and removes Dir. A pin left in it (a crashed svcproxy's)
// goes with the mount: its programs detach once nothing else holds them.
func (b *BPFFS) Unmount() error {
	dir := b.Dir()
	if b.mounted() {
		if err := unix.Unmount(dir, 0); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Leftovers lists the lab's bpffs, for Net.Leftovers.
func (b *BPFFS) Leftovers() []string {
	if b.mounted() {
		return []string{"mount bpf on " + b.Dir()}
	}
	if _, err := os.Stat(b.Dir()); err == nil {
		return []string{"file " + b.Dir()}
	}
	return nil
}
