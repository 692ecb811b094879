package vm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Kernel is an unpacked Debian kernel package in the cache.
type Kernel struct {
	Version string // "6.1.0-57-amd64"
	Vmlinuz string // the package's compressed kernel (bzImage)
	// Image is what QEMU boots: the uncompressed ELF vmlinux when it could be
	// extracted (QEMU boots it through its PVH entry, CONFIG_PVH, skipping the xz
	// decompression that takes 10-30 s under TCG), else Vmlinuz.
	Image string
	Root  string // the unpacked package: Root/lib/modules/Version/...
}

// ModulesDir is lib/modules/<version> of the unpacked package.
func (k *Kernel) ModulesDir() string { return filepath.Join(k.Root, "lib", "modules", k.Version) }

// DefaultCacheDir is $SVCPROXY_VM_CACHE, else ~/.cache/svcproxy/vm: outside the
// repository, shared by every checkout, kept between runs.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("SVCPROXY_VM_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("vm cache dir: %w", err)
	}
	return filepath.Join(d, "svcproxy", "vm"), nil
}

// FetchKernel returns the kernel in cacheDir, downloading and unpacking it first if
// needed. The package is $SVCPROXY_VM_KERNEL_PKG, else the linux-image-*-amd64 that
// linux-image-amd64 depends on. Concurrent callers (other test processes) wait on a
// lock file instead of unpacking twice.
func FetchKernel(ctx context.Context, cacheDir string) (*Kernel, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("vm cache dir: %w", err)
	}
	unlock, err := lockFile(filepath.Join(cacheDir, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()

	pkg := os.Getenv("SVCPROXY_VM_KERNEL_PKG")
	if pkg == "" {
		if pkg, err = kernelPackage(ctx); err != nil {
			return nil, err
		}
	}
	k := &Kernel{Version: strings.TrimPrefix(pkg, "linux-image-"), Root: filepath.Join(cacheDir, pkg)}
	k.Vmlinuz = filepath.Join(k.Root, "boot", "vmlinuz-"+k.Version)
	vmlinux := filepath.Join(k.Root, "boot", "vmlinux-"+k.Version)
	ready := filepath.Join(k.Root, ".ready")
	if _, err := os.Stat(ready); err != nil {
		if err := unpackKernel(ctx, cacheDir, pkg, k); err != nil {
			return nil, err
		}
		if err := extractVmlinux(ctx, k.Vmlinuz, vmlinux); err != nil {
			os.Remove(vmlinux) // boot the bzImage, slower
		}
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			return nil, fmt.Errorf("vm cache: %w", err)
		}
	}
	k.Image = k.Vmlinuz
	if _, err := os.Stat(vmlinux); err == nil {
		k.Image = vmlinux
	}
	return k, nil
}

// xzMagic starts an xz stream (Debian compresses its kernels with xz: CONFIG_KERNEL_XZ).
var xzMagic = []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}

// extractVmlinux does what the kernel's scripts/extract-vmlinux does: find the xz
// stream inside the bzImage and decompress it. xz complains about the bytes after the
// stream; the output is good when it is an ELF file.
func extractVmlinux(ctx context.Context, bzImage, out string) error {
	b, err := os.ReadFile(bzImage)
	if err != nil {
		return err
	}
	i := bytes.Index(b, xzMagic)
	if i < 0 {
		return fmt.Errorf("%s: no xz stream", bzImage)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, "xz", "-dcq")
	cmd.Stdin = bytes.NewReader(b[i:])
	cmd.Stdout = f
	cmd.Run() // trailing garbage: judged by the output below
	head := make([]byte, 4)
	if _, err := f.ReadAt(head, 0); err != nil || string(head) != "\x7fELF" {
		return fmt.Errorf("%s: xz -d did not give an ELF vmlinux", bzImage)
	}
	return nil
}

// kernelPackage asks apt which kernel the linux-image-amd64 metapackage stands for.
func kernelPackage(ctx context.Context) (string, error) {
	out, err := run(ctx, "", "apt-cache", "depends", "linux-image-amd64")
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("apt-cache depends linux-image-amd64: no linux-image-* dependency in %q", out)
}

func unpackKernel(ctx context.Context, cacheDir, pkg string, k *Kernel) error {
	debs, _ := filepath.Glob(filepath.Join(cacheDir, pkg+"_*.deb"))
	if len(debs) == 0 {
		if _, err := run(ctx, cacheDir, "apt-get", "download", pkg); err != nil {
			return err
		}
		debs, _ = filepath.Glob(filepath.Join(cacheDir, pkg+"_*.deb"))
		if len(debs) == 0 {
			return fmt.Errorf("apt-get download %s: no %s_*.deb in %s", pkg, pkg, cacheDir)
		}
	}
	tmp := k.Root + ".tmp"
	os.RemoveAll(tmp)
	if _, err := run(ctx, "", "dpkg", "-x", debs[0], tmp); err != nil {
		return err
	}
	// The .deb ships no modules.dep; modprobe in the guest needs one.
	if _, err := run(ctx, "", "depmod", "-b", tmp, k.Version); err != nil {
		return err
	}
	os.RemoveAll(k.Root)
	if err := os.Rename(tmp, k.Root); err != nil {
		return fmt.Errorf("vm cache: %w", err)
	}
	return nil
}

func lockFile(p string) (unlock func(), err error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vm cache lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("vm cache lock %s: %w", p, err)
	}
	return func() { f.Close() }, nil
}

// run runs a command and returns its stdout; the error carries its stderr.
func run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
