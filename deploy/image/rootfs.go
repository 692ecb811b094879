package image

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Tool is a command in the image: Name is its path there, Target the file it
// runs, a multi-call binary for the iptables family (the name it is called by
// picks the program).
type Tool struct {
	Name   string // "/usr/sbin/iptables-restore"
	Target string // "/usr/sbin/xtables-nft-multi"; "" is Name itself
}

// iptablesNames are the names kube-proxy's image provides for each backend.
var iptablesNames = []string{
	"iptables", "iptables-save", "iptables-restore",
	"ip6tables", "ip6tables-save", "ip6tables-restore",
}

// DefaultTools are the commands svcproxy runs, and two for a person
// debugging a node. iptables is the nf_tables backend, as on kind's nodes and
// on Debian since 10; iptables-legacy and friends are there for nodes whose
// rules are in the legacy tables (run `iptables-legacy-save` to see).
func DefaultTools() []Tool {
	const nftMulti, legacyMulti = "/usr/sbin/xtables-nft-multi", "/usr/sbin/xtables-legacy-multi"
	var tools []Tool
	for _, n := range iptablesNames {
		tools = append(tools,
			Tool{Name: "/usr/sbin/" + n, Target: nftMulti},
			Tool{Name: "/usr/sbin/" + strings.Replace(n, "tables", "tables-nft", 1), Target: nftMulti},
			Tool{Name: "/usr/sbin/" + strings.Replace(n, "tables", "tables-legacy", 1), Target: legacyMulti},
		)
	}
	return append(tools,
		Tool{Name: "/usr/sbin/nft"},
		Tool{Name: "/usr/sbin/ipset"},
		Tool{Name: "/usr/sbin/conntrack"},
		Tool{Name: "/usr/sbin/modprobe", Target: "/usr/bin/kmod"},
	)
}

// xtablesDir holds the iptables extensions (libxt_*.so), which iptables opens
// with dlopen by the match or target's name: ldd does not see them.
const xtablesDir = "/usr/lib/x86_64-linux-gnu/xtables"

// hostFiles are copied from the machine as they are: the names iptables and
// the resolver read (protocols for "-p tcp", services for port names).
var hostFiles = []string{"/etc/protocols", "/etc/services", "/etc/ethertypes"}

// file is one entry of the image's layer.
type file struct {
	path string      // in the image, absolute
	mode os.FileMode // permissions and type (directory, symlink)
	src  string      // a regular file's source on this machine
	data []byte      // or its content
	link string      // a symlink's target
}

// rootfs is the image's file tree as it is gathered: path -> entry.
type rootfs map[string]file

func (r rootfs) addDir(p string, mode os.FileMode) {
	for d := p; d != "/" && d != "."; d = path.Dir(d) {
		if _, ok := r[d]; !ok {
			r[d] = file{path: d, mode: os.ModeDir | 0o755}
		}
	}
	r[p] = file{path: p, mode: os.ModeDir | mode}
}

func (r rootfs) addFile(f file) {
	r.addParents(f.path)
	r[f.path] = f
}

func (r rootfs) addParents(p string) {
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if _, ok := r[d]; ok {
			break
		}
		r[d] = file{path: d, mode: os.ModeDir | 0o755}
	}
}

// addHostFile copies a regular file of this machine to the same path in the
// image, following symlinks on the way to it.
func (r rootfs) addHostFile(p string) error {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", p)
	}
	r.addFile(file{path: p, mode: fi.Mode().Perm(), src: real})
	return nil
}

// addTools copies each tool's binary, links the tool's name to it, and copies
// the shared libraries every binary and iptables extension needs.
func (r rootfs) addTools(tools []Tool) error {
	var elfs []string
	seen := map[string]bool{}
	for _, t := range tools {
		target := t.Target
		if target == "" {
			target = t.Name
		}
		if !seen[target] {
			if err := r.addHostFile(target); err != nil {
				return fmt.Errorf("tool %s: %w (is its Debian package installed? make deps)", t.Name, err)
			}
			seen[target] = true
			elfs = append(elfs, target)
		}
		if target != t.Name {
			rel, err := filepath.Rel(path.Dir(t.Name), target)
			if err != nil {
				return err
			}
			r.addFile(file{path: t.Name, mode: os.ModeSymlink | 0o777, link: rel})
		}
	}
	exts, err := filepath.Glob(filepath.Join(xtablesDir, "*.so"))
	if err != nil || len(exts) == 0 {
		return fmt.Errorf("iptables extensions: none in %s (the iptables package)", xtablesDir)
	}
	for _, e := range exts {
		if err := r.addHostFile(e); err != nil {
			return err
		}
	}
	libs, err := sharedLibraries(append(elfs, exts...))
	if err != nil {
		return err
	}
	for _, l := range libs {
		if err := r.addHostFile(l); err != nil {
			return fmt.Errorf("library %s: %w", l, err)
		}
	}
	return nil
}

// sharedLibraries lists, sorted, the libraries ldd finds for the given ELF
// files, the dynamic loader among them: ldd resolves the whole closure.
func sharedLibraries(elfs []string) ([]string, error) {
	set := map[string]bool{}
	for _, e := range elfs {
		out, err := exec.Command("ldd", e).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", e, err)
		}
		for _, lib := range parseLdd(out) {
			set[lib] = true
		}
	}
	libs := make([]string, 0, len(set))
	for l := range set {
		libs = append(libs, l)
	}
	sort.Strings(libs)
	return libs, nil
}

// parseLdd takes the paths out of ldd's lines:
//
//	libmnl.so.0 => /lib/x86_64-linux-gnu/libmnl.so.0 (0x00007f...)
//	/lib64/ld-linux-x86-64.so.2 (0x00007f...)
//	linux-vdso.so.1 (0x00007ffd...)            (in the kernel: no file)
func parseLdd(out []byte) []string {
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs
}
