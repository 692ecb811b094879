package vm

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
)

// libDirs are where Debian keeps shared libraries, searched in this order.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/lib", "/usr/lib"}

// AddHostBinary copies a dynamically linked host binary (or shared object) into the
// guest at guestPath, with its ELF interpreter and every shared library it needs,
// transitively, at the same paths as on the host.
func (g *Guest) AddHostBinary(guestPath, hostPath string) error {
	if g.Files == nil {
		g.Files = map[string]string{}
	}
	g.Files[guestPath] = hostPath
	return g.addLibraries(hostPath, map[string]bool{})
}

func (g *Guest) addLibraries(hostPath string, seen map[string]bool) error {
	f, err := elf.Open(hostPath)
	if err != nil {
		return fmt.Errorf("guest binary %s: %w", hostPath, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return fmt.Errorf("guest binary %s: interpreter: %w", hostPath, err)
			}
			interp := string(b[:len(b)-1]) // NUL-terminated
			g.Files[interp] = interp
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("guest binary %s: %w", hostPath, err)
	}
	for _, lib := range libs {
		if seen[lib] {
			continue
		}
		seen[lib] = true
		found := ""
		for _, d := range libDirs {
			if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
				found = filepath.Join(d, lib)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("guest binary %s: library %s: not found in %v", hostPath, lib, libDirs)
		}
		g.Files[found] = found
		if err := g.addLibraries(found, seen); err != nil {
			return err
		}
	}
	return nil
}

// xtablesDir is where the iptables binaries look for their match and target
// extensions (libxt_*.so), compiled into libxtables.
const xtablesDir = "/usr/lib/x86_64-linux-gnu/xtables"

// AddIPTables adds the legacy iptables (x_tables, not nf_tables: it needs fewer
// modules and no nft socket), as iptables, iptables-save and iptables-restore and
// their ip6tables twins, with its extensions, and ipset. The guest must load
// ip_tables, iptable_nat (ip6_tables, ip6table_nat) and the xt_* and ip_set*
// modules the rules use (IPVSModules does).
func (g *Guest) AddIPTables() error {
	multi := "/usr/sbin/xtables-legacy-multi"
	if err := g.AddHostBinary("/bin/xtables-legacy-multi", multi); err != nil {
		return fmt.Errorf("%w (install iptables)", err)
	}
	if g.Symlinks == nil {
		g.Symlinks = map[string]string{}
	}
	for _, n := range []string{"iptables", "iptables-save", "iptables-restore", "iptables-legacy",
		"ip6tables", "ip6tables-save", "ip6tables-restore", "ip6tables-legacy"} {
		g.Symlinks["/bin/"+n] = "xtables-legacy-multi"
	}
	exts, err := filepath.Glob(filepath.Join(xtablesDir, "*.so"))
	if err != nil || len(exts) == 0 {
		return fmt.Errorf("iptables extensions: none in %s (install iptables)", xtablesDir)
	}
	for _, e := range exts {
		if err := g.AddHostBinary(e, e); err != nil {
			return err
		}
	}
	if err := g.AddHostBinary("/bin/ipset", "/usr/sbin/ipset"); err != nil {
		return fmt.Errorf("%w (install ipset)", err)
	}
	// ipset reads "tcp" in "198.18.0.10,tcp:80" with getprotobyname(3).
	if _, err := os.Stat("/etc/protocols"); err != nil {
		return fmt.Errorf("ipset needs /etc/protocols (install netbase): %w", err)
	}
	g.Files["/etc/protocols"] = "/etc/protocols"
	return nil
}
