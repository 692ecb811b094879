package socklb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Pinning: how a restart keeps the translation going. A bpf object lives as
// long as something refers to it: a file descriptor, an attachment, or a
// file in a bpffs (a pin). Without pins, the process that made the maps and
// the links holds their only references, and when it exits the programs
// detach: for the moment until the next svcproxy attaches again, connect()
// to a Service goes to the VIP itself. With Config.PinPath, New pins each map
// under its name (svcp_services, ...) and each program's link under
// svcp_link_<hook> (svcp_link_connect4, ...), so they outlive the process;
// the next New finds them and adopts them:
//
//   - a map pinned with the same spec (type, key and value sizes, size) is
//     opened instead of created, elements and all (ebpf.PinByName); a
//     different spec is an error (MaxServices changed: Cleanup first);
//   - a pinned link gets the newly loaded program in place of the old one,
//     atomically (BPF_LINK_UPDATE): every connect() runs the old or the new
//     program, none runs neither.
//
// Cilium does the same with its maps in /sys/fs/bpf/tc/globals and its
// socket programs' links in /sys/fs/bpf/cilium/socketlb/links/cgroup. A
// link update swaps the program, never the cgroup the link is bound to, so
// an adopted link attached to another cgroup than Config.CgroupPath (the
// configuration changed) is an error here, where it would go unnoticed.

// openMap creates the map of spec or, with a pin path, adopts the one pinned
// there under spec.Name (creating and pinning it when there is none).
func openMap(spec *ebpf.MapSpec, pinPath string) (*ebpf.Map, error) {
	if pinPath == "" {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			return nil, fmt.Errorf("socklb: create map %s: %w", spec.Name, err)
		}
		return m, nil
	}
	spec = spec.Copy()
	spec.Pinning = ebpf.PinByName
	m, err := ebpf.NewMapWithOptions(spec, ebpf.MapOptions{PinPath: pinPath})
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return nil, fmt.Errorf("socklb: config: PinPath %s: map %s is pinned with another layout or size (run Cleanup first): %w", pinPath, spec.Name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("socklb: create or adopt map %s in %s: %w", spec.Name, pinPath, err)
	}
	return m, nil
}

// linkPin is where hook h's link is pinned.
func linkPin(pinPath, hook string) string {
	return filepath.Join(pinPath, "svcp_link_"+hook)
}

// attach attaches prog to cfg.CgroupPath at h's hook, or, with a pin path
// where a previous Kernel pinned h's link, puts prog into that link.
func attach(cfg Config, h hook, prog *ebpf.Program) (link.Link, error) {
	if cfg.PinPath == "" {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cfg.CgroupPath, Attach: h.attach, Program: prog})
		if err != nil {
			return nil, fmt.Errorf("socklb: attach %s to %s: %w", h.name, cfg.CgroupPath, err)
		}
		return l, nil
	}
	path := linkPin(cfg.PinPath, h.name)
	l, err := link.LoadPinnedLink(path, nil)
	switch {
	case errors.Is(err, os.ErrNotExist):
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cfg.CgroupPath, Attach: h.attach, Program: prog})
		if err != nil {
			return nil, fmt.Errorf("socklb: attach %s to %s: %w", h.name, cfg.CgroupPath, err)
		}
		if err := l.Pin(path); err != nil {
			l.Close()
			return nil, fmt.Errorf("socklb: pin %s's link at %s: %w", h.name, path, err)
		}
		return l, nil
	case err != nil:
		return nil, fmt.Errorf("socklb: adopt %s's link %s: %w", h.name, path, err)
	}
	if err := sameCgroup(l, cfg.CgroupPath); err != nil {
		l.Close()
		return nil, fmt.Errorf("socklb: config: CgroupPath: %s's link %s: %w", h.name, path, err)
	}
	if err := l.Update(prog); err != nil {
		l.Close()
		return nil, fmt.Errorf("socklb: replace %s's program in its link %s: %w", h.name, path, err)
	}
	return l, nil
}

// sameCgroup checks that the cgroup link l is attached to cgroupPath: a
// pinned link attached elsewhere (the configuration changed) would leave the
// new cgroup untranslated. A cgroup v2 directory's inode number is the
// cgroup's ID.
func sameCgroup(l link.Link, cgroupPath string) error {
	info, err := l.Info()
	if err != nil {
		return fmt.Errorf("link info: %w", err)
	}
	cg := info.Cgroup()
	if cg == nil {
		return errors.New("not a cgroup link")
	}
	var st unix.Stat_t
	if err := unix.Stat(cgroupPath, &st); err != nil {
		return fmt.Errorf("stat %s: %w", cgroupPath, err)
	}
	if cg.CgroupId != st.Ino {
		return fmt.Errorf("attached to cgroup %d, not %s (cgroup %d): run Cleanup first", cg.CgroupId, cgroupPath, st.Ino)
	}
	return nil
}

// readIDs learns the IDs of the Services already in the services map (an
// adopted one), so that new Services get other IDs, after the highest.
func (k *Kernel) readIDs() error {
	var key svcKey
	var val svcValue
	it := k.m.services.Iterate()
	for it.Next(&key, &val) {
		if err := k.ids.adopt(decodeSvcKey(key), val.ID); err != nil {
			return fmt.Errorf("socklb: the adopted services map: %w", err)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("socklb: read the adopted services map: %w", err)
	}
	return nil
}

// Cleanup detaches and unpins everything a Kernel with cfg.PinPath pinned:
// the links (removing the pin of a link no process holds detaches its
// program) and the maps. Call it after the Kernel is closed; what is not
// there is skipped, so it can run twice. The directory itself, and the
// bpffs, stay the caller's.
func Cleanup(cfg Config) error {
	if cfg.PinPath == "" {
		return errors.New("socklb: cleanup: config: PinPath: must not be empty (without pins, the programs detach when their Kernel is closed)")
	}
	var errs []error
	for _, h := range hooks {
		path := linkPin(cfg.PinPath, h.name)
		l, err := link.LoadPinnedLink(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("socklb: cleanup: %s: %w", path, err))
			continue
		}
		if err := l.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("socklb: cleanup: unpin %s: %w", path, err))
		}
		errs = append(errs, l.Close())
	}
	svcSpec, beSpec, revSpec, affSpec := mapSpecs(1)
	for _, spec := range []*ebpf.MapSpec{svcSpec, beSpec, revSpec, affSpec, countsSpec(1)} {
		// A map's pin is a file; removing it drops that reference.
		path := filepath.Join(cfg.PinPath, spec.Name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("socklb: cleanup: unpin %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
}
