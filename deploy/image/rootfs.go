package image

import (
	"bufio"
	"bytes"
	"encoding/binary"
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
	path   string      // in the image, absolute
	mode   os.FileMode // permissions and type (directory, symlink)
	src    string      // a regular file's source on this machine
	data   []byte      // or its content
	link   string      // a symlink's target
	xattrs map[string]string
}

// Root is an image's file tree as it is gathered, path -> entry; Image makes
// it the image's one layer. Every entry is owned by root and dated epoch, so
// the same inputs give the same digest. The zero value is an empty tree.
// svcproxy's image (Build) and the test images of Kubernetes' e2e tests
// (images) are both put together with it.
type Root struct {
	files map[string]file
	// Fast compresses the layer at gzip's fastest level, not its best: for
	// images that never leave this machine (the lab's nodes import them),
	// where the best level costs about six times the CPU for a layer 8%
	// smaller (kube-apiserver's: 66 MB against 71).
	Fast bool
}

func (r *Root) set(f file) {
	if r.files == nil {
		r.files = map[string]file{}
	}
	r.files[f.path] = f
}

// AddDir adds directory p, and its parents (0755) where missing.
func (r *Root) AddDir(p string, mode os.FileMode) {
	for d := p; d != "/" && d != "."; d = path.Dir(d) {
		if _, ok := r.files[d]; !ok {
			r.set(file{path: d, mode: os.ModeDir | 0o755})
		}
	}
	r.set(file{path: p, mode: os.ModeDir | mode})
}

// AddFile adds a regular file p with the given content.
func (r *Root) AddFile(p string, mode os.FileMode, data []byte) {
	r.addFile(file{path: p, mode: mode, data: data})
}

// AddSymlink adds p as a symlink to target.
func (r *Root) AddSymlink(p, target string) {
	r.addFile(file{path: p, mode: os.ModeSymlink | 0o777, link: target})
}

// CopyFile adds the regular file src of this machine as p, following
// symlinks on the way to src; mode 0 keeps src's permissions.
func (r *Root) CopyFile(src, p string, mode os.FileMode) error {
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	if mode == 0 {
		mode = fi.Mode().Perm()
	}
	r.addFile(file{path: p, mode: mode, src: real})
	return nil
}

// AddHostFile copies a regular file of this machine to the same path in the
// image, following symlinks on the way to it.
func (r *Root) AddHostFile(p string) error {
	return r.CopyFile(p, p, 0)
}

func (r *Root) addFile(f file) {
	r.addParents(f.path)
	r.set(f)
}

func (r *Root) addParents(p string) {
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if _, ok := r.files[d]; ok {
			break
		}
		r.set(file{path: d, mode: os.ModeDir | 0o755})
	}
}

// AddNetfilter adds the netfilter tools (nil: DefaultTools) with the
// iptables extensions and the files of this machine they read (protocol,
// service and ethertype names): what a service proxy's image needs.
func (r *Root) AddNetfilter(tools []Tool) error {
	if tools == nil {
		tools = DefaultTools()
	}
	for _, f := range hostFiles {
		if _, err := os.Stat(f); err == nil {
			if err := r.AddHostFile(f); err != nil {
				return err
			}
		}
	}
	exts, err := filepath.Glob(filepath.Join(xtablesDir, "*.so"))
	if err != nil || len(exts) == 0 {
		return fmt.Errorf("iptables extensions: none in %s (the iptables package)", xtablesDir)
	}
	return r.AddTools(tools, exts...)
}

// AddProgram copies the program src of this machine into the image as p,
// with the shared libraries ldd finds for it (none for a static one).
func (r *Root) AddProgram(src, p string) error {
	if err := r.CopyFile(src, p, 0o755); err != nil {
		return err
	}
	libs, err := sharedLibraries([]string{src})
	if err != nil {
		return err
	}
	for _, l := range libs {
		if err := r.AddHostFile(l); err != nil {
			return fmt.Errorf("library %s: %w", l, err)
		}
	}
	return nil
}

// SetFileCaps gives the file p, already added, the file capabilities caps
// (bit numbers, linux/capability.h) in its permitted set with the effective
// flag, as `setcap cap_net_bind_service=+ep FILE` does: an extended
// attribute security.capability (struct vfs_cap_data, revision 2), written
// into the layer as a PAX record, which containerd sets when it unpacks it.
// A process that executes the file as a user other than root then holds
// those capabilities, if its bounding set has them.
func (r *Root) SetFileCaps(p string, caps ...uint) error {
	f, ok := r.files[p]
	if !ok || !f.mode.IsRegular() {
		return fmt.Errorf("file capabilities: %s: not a regular file of the image", p)
	}
	var permitted [2]uint32
	for _, c := range caps {
		if c >= 64 {
			return fmt.Errorf("file capabilities: %s: capability %d out of range", p, c)
		}
		permitted[c/32] |= 1 << (c % 32)
	}
	const revision2, effective = 0x02000000, 0x000001
	var v [20]byte // magic_etc, then {permitted, inheritable} twice, little-endian
	binary.LittleEndian.PutUint32(v[0:], revision2|effective)
	binary.LittleEndian.PutUint32(v[4:], permitted[0])
	binary.LittleEndian.PutUint32(v[12:], permitted[1])
	if f.xattrs == nil {
		f.xattrs = map[string]string{}
	}
	f.xattrs["security.capability"] = string(v[:])
	r.files[p] = f
	return nil
}

// AddTools copies each tool's binary, links the tool's name to it, and copies
// the shared libraries every binary needs, and those of the dlopened files
// (copied as well: plugins a tool opens by name, which ldd does not see).
func (r *Root) AddTools(tools []Tool, dlopened ...string) error {
	var elfs []string
	seen := map[string]bool{}
	for _, t := range tools {
		target := t.Target
		if target == "" {
			target = t.Name
		}
		if !seen[target] {
			if err := r.AddHostFile(target); err != nil {
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
			r.AddSymlink(t.Name, rel)
		}
	}
	for _, e := range dlopened {
		if err := r.AddHostFile(e); err != nil {
			return err
		}
	}
	libs, err := sharedLibraries(append(elfs, dlopened...))
	if err != nil {
		return err
	}
	for _, l := range libs {
		if err := r.AddHostFile(l); err != nil {
			return fmt.Errorf("library %s: %w", l, err)
		}
	}
	return nil
}

// sharedLibraries lists, sorted, the libraries ldd finds for the given ELF
// files, the dynamic loader among them: ldd resolves the whole closure. A
// static binary has none.
func sharedLibraries(elfs []string) ([]string, error) {
	set := map[string]bool{}
	for _, e := range elfs {
		out, err := exec.Command("ldd", e).CombinedOutput()
		if err != nil {
			if bytes.Contains(out, []byte("not a dynamic executable")) {
				continue
			}
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
