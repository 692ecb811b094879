package vm

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// Guest is what the VM runs.
type Guest struct {
	// Modules are loaded in this order by /init, with their dependencies; a module
	// that fails to load is reported on the console and skipped.
	Modules []string
	// Files maps guest paths to host files copied into the initramfs, executable.
	Files map[string]string
	// Data maps guest paths to the content of small files written into the
	// initramfs (a file the guest's programs expect to exist).
	Data map[string][]byte
	// Symlinks maps guest paths to their targets (after busybox's applets, so a
	// name here wins over an applet of the same name).
	Symlinks map[string]string
	// Command is run by /init once the modules are loaded; its exit code is the
	// result. Arguments are passed as they are (no shell expansion).
	Command []string
}

// Markers /init prints on the console.
const (
	readyMarker  = "SVCPROXY-VM-READY"
	resultMarker = "SVCPROXY-VM-RESULT"
)

// buildInitramfs writes the guest's initramfs to out.
func buildInitramfs(k *Kernel, g Guest, out string) error {
	a := archive{}
	if err := addBusybox(a); err != nil {
		return err
	}
	if err := addModules(a, k, g.Modules); err != nil {
		return err
	}
	for guest, host := range g.Files {
		a.file(guest, host, 0o755)
	}
	for guest, data := range g.Data {
		a.data(guest, data, 0o644)
	}
	for guest, target := range g.Symlinks {
		a.symlink(guest, target)
	}
	for _, d := range []string{"/proc", "/sys", "/dev", "/tmp", "/run", "/etc"} {
		a.dir(d)
	}
	a.data("/init", []byte(initScript(g)), 0o755)
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := a.writeTo(f); err != nil {
		f.Close()
		return fmt.Errorf("initramfs: %w", err)
	}
	return f.Close()
}

// initScript mounts the pseudo file systems, brings lo up (IPVS refuses real servers
// as "not unicast" while lo is down), loads the modules, runs the command and prints
// its exit code. poweroff -f ends QEMU; a panic reboots, which -no-reboot turns into
// an exit without a result line.
func initScript(g Guest) string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
export PATH=/bin:/sbin HOME=/tmp LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
ip link set lo up
for m in`)
	for _, m := range g.Modules {
		b.WriteString(" " + m)
	}
	b.WriteString(`; do
	modprobe "$m" 2>/dev/null || echo "vm: modprobe $m failed"
done
echo "` + readyMarker + ` uptime=$(cut -d' ' -f1 /proc/uptime)"
cd /tmp
`)
	for i, arg := range g.Command {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(shellQuote(arg))
	}
	b.WriteString(`
echo "` + resultMarker + ` $? uptime=$(cut -d' ' -f1 /proc/uptime)"
poweroff -f
`)
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// addBusybox adds a static busybox and a symlink per applet. Debian's "busybox"
// package is linked dynamically and would not start in the guest: "busybox-static".
func addBusybox(a archive) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox: %w (install busybox-static)", err)
	}
	f, err := elf.Open(bb)
	if err != nil {
		return fmt.Errorf("busybox %s: %w", bb, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("busybox %s: dynamically linked (install busybox-static)", bb)
		}
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	a.file("/bin/busybox", bb, 0o755)
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" {
			a.symlink("/bin/"+applet, "busybox")
		}
	}
	a.symlink("/sbin", "bin")
	return nil
}

// addModules adds the named modules and everything they depend on, and a modules.dep
// that lists just those, for busybox modprobe.
func addModules(a archive, k *Kernel, names []string) error {
	dir := k.ModulesDir()
	deps, err := readModulesDep(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return err
	}
	byName := map[string]string{} // module name -> path in modules.dep
	for p := range deps {
		byName[moduleName(p)] = p
	}
	seen := map[string]bool{}
	var add func(p string)
	add = func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		for _, d := range deps[p] {
			add(d)
		}
	}
	for _, n := range names {
		p, ok := byName[strings.ReplaceAll(n, "-", "_")]
		if !ok {
			continue // built in, or absent in this kernel: /init reports it
		}
		add(p)
	}
	var dep strings.Builder
	guestDir := "/lib/modules/" + k.Version
	for p := range seen {
		a.file(path.Join(guestDir, p), filepath.Join(dir, p), 0o644)
		fmt.Fprintf(&dep, "%s: %s\n", p, strings.Join(deps[p], " "))
	}
	a.data(path.Join(guestDir, "modules.dep"), []byte(dep.String()), 0o644)
	return nil
}

// readModulesDep parses depmod's "kernel/a.ko: kernel/b.ko kernel/c.ko" lines.
func readModulesDep(p string) (map[string][]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("modules.dep: %w (was depmod -b run?)", err)
	}
	defer f.Close()
	deps := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if ok {
			deps[mod] = strings.Fields(rest)
		}
	}
	return deps, sc.Err()
}

// moduleName is the name modprobe knows a module file by: "kernel/x/crc32c-intel.ko"
// is crc32c_intel.
func moduleName(p string) string {
	n := path.Base(p)
	for _, ext := range []string{".xz", ".zst", ".gz", ".ko"} {
		n = strings.TrimSuffix(n, ext)
	}
	return strings.ReplaceAll(n, "-", "_")
}
