package lifecycle

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
)

// DefaultCgroup is where the socket LB attaches without --socklb-cgroup: the
// node's cgroup2 root, so every process of the node (and every pod, each in a
// cgroup below it) is seen, as Cilium attaches at /run/cilium/cgroupv2. It
// must be a cgroup2 mount; on a machine that mounts cgroup v1 there (a tmpfs
// of v1 controllers), the flag must name one.
const DefaultCgroup = "/sys/fs/cgroup"

// DefaultPinPath is where the socket LB pins its maps and links without
// --socklb-pin-path: a directory of its own on the node's bpffs, as Cilium
// pins under /sys/fs/bpf.
const DefaultPinPath = "/sys/fs/bpf/svcproxy"

// Config is where the node's socket LB lives.
type Config struct {
	// Cgroup is --socklb-cgroup: the cgroup v2 directory whose processes'
	// connect() the socket LB sees; "" is DefaultCgroup.
	Cgroup string
	// PinPath is --socklb-pin-path: the bpffs directory the maps and links
	// are pinned in, so they outlive the process; "" pins nothing.
	// PinPathGiven: the flag was given. A given directory that is not on a
	// bpffs is an error; the default there is logged and pins nothing.
	PinPath      string
	PinPathGiven bool
	// Logger gets what is not an error (the default pin path left out, a
	// leftover removed); nil: slog.Default().
	Logger *slog.Logger
}

func (c *Config) log() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// Open loads the socket LB's programs and attaches them to cfg.Cgroup
// (kernel/socklb.New), pinned in cfg.PinPath. It checks first what would
// otherwise fail later with a less clear errno: that the directory is a
// cgroup v2 one, and that the pin path's parent is on a bpffs.
func Open(cfg Config) (*ksocklb.Kernel, error) {
	path := cfg.Cgroup
	if path == "" {
		path = DefaultCgroup
	}
	if err := isCgroup2(path); err != nil {
		if cfg.Cgroup == "" {
			return nil, fmt.Errorf("--socklb-cgroup not given and the default %s: %w; name a cgroup2 directory (where cgroup v1 is mounted, the hybrid hierarchy's /sys/fs/cgroup/unified, or a mount -t cgroup2 of your own)", path, err)
		}
		return nil, fmt.Errorf("--socklb-cgroup %s: %w", path, err)
	}
	pin, err := pinPath(cfg)
	if err != nil {
		return nil, err
	}
	k, err := ksocklb.New(ksocklb.Config{CgroupPath: path, PinPath: pin})
	if err != nil {
		return nil, fmt.Errorf("--socklb-cgroup %s, --socklb-pin-path %q: %w", path, pin, err)
	}
	return k, nil
}

// pinPath is the directory the socket LB pins in ("" for none), made when
// missing. Its parent must be on a bpffs: a --socklb-pin-path given
// elsewhere is an error; the default on a node without /sys/fs/bpf mounted
// is logged, and nothing is pinned (a restart then leaves new connections to
// the nftables path until the next svcproxy attaches).
func pinPath(cfg Config) (string, error) {
	path := cfg.PinPath
	if path == "" {
		return "", nil
	}
	if err := isBPFFS(filepath.Dir(path)); err != nil {
		if !cfg.PinPathGiven {
			cfg.log().Warn("socket LB not pinned: a restart interrupts its translation (mount -t bpf bpf /sys/fs/bpf, or give --socklb-pin-path)",
				"path", path, "reason", err)
			return "", nil
		}
		return "", fmt.Errorf("--socklb-pin-path %s: %s: %w", path, filepath.Dir(path), err)
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("--socklb-pin-path %s: %w", path, err)
	}
	return path, nil
}

// isBPFFS says why dir is not a directory of a bpffs, or nil.
func isBPFFS(dir string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return err
	}
	if fs.Type != unix.BPF_FS_MAGIC {
		return errors.New("not on a bpffs")
	}
	return nil
}

// isCgroup2 says why path is not a directory of a cgroup v2 hierarchy, or nil.
func isCgroup2(path string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return err
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return errors.New("not a cgroup v2 directory")
	}
	return nil
}

// Remove detaches and unpins what a socket LB pinned in pinPath
// (kernel/socklb.Cleanup), and removes the directory svcproxy made there.
// Without the directory there is nothing to do: an unpinned socket LB went
// with its process.
func Remove(pinPath string) error {
	if pinPath == "" {
		return nil
	}
	if _, err := os.Stat(pinPath); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := ksocklb.Cleanup(ksocklb.Config{PinPath: pinPath}); err != nil {
		return err
	}
	if err := os.Remove(pinPath); err != nil {
		return fmt.Errorf("remove %s: %w", pinPath, err)
	}
	return nil
}

// RemoveLeftover removes the socket LB an earlier svcproxy pinned in
// cfg.PinPath, for a mode that does not use it, saying so in one line: it
// would go on rewriting connect() from maps nobody updates. Only a path the
// flag names (PinPathGiven): every mode has the flag's default, and a mode
// that never asked for the socket LB does not go looking in the machine's
// own bpffs. A failure is logged, not returned: the mode itself works, and
// --cleanup can try again.
func RemoveLeftover(cfg Config, mode string) {
	if cfg.PinPath == "" || !cfg.PinPathGiven {
		return
	}
	if _, err := os.Stat(cfg.PinPath); err != nil {
		return // nothing pinned (or nothing we may look at)
	}
	if err := Remove(cfg.PinPath); err != nil {
		cfg.log().Warn("cannot remove the socket LB an earlier svcproxy pinned; it still rewrites connect() (svcproxy --cleanup)",
			"path", cfg.PinPath, "mode", mode, "err", err)
		return
	}
	cfg.log().Info("removed the socket LB an earlier svcproxy pinned: this mode does not use it", "path", cfg.PinPath, "mode", mode)
}
