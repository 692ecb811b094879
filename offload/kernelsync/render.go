package kernelsync

import "github.com/svcproxy/svcproxy/service"

// Ports is a Snapshot's ports rendered against what the last sync applied:
// what a path's sync hands to Ledger.End.
type Ports[P Port] struct {
	// All are every port rendered, in the Snapshot's order.
	All []P
	// Changed are the ports rendered anew, with what each replaces (nil for a
	// new port); a port reused as it was is not among them.
	Changed []Change[P]
	// Removed are the applied ports the Snapshot no longer has, or that render
	// to nothing now (a Service that became headless).
	Removed []P
}

// RenderPorts renders the ports of snap that carries accepts (nil: every
// one). A port that renders the same (service.Port.RendersSameAs), in the
// same zone of this node, as the one its applied rendering was made from
// reuses that rendering, so that a sync after one change renders one port,
// not 10,000; the others are rendered by render, the path's own, which
// returns the zero P for a port with nothing to render.
func RenderPorts[P Port](snap *service.Snapshot, applied map[service.PortName]P,
	carries func(service.PortName) bool, render func(*service.Port) P) Ports[P] {
	zone := snap.Node().Zone()
	include := func(p *service.Port) bool { return carries == nil || carries(p.Name) }
	var zero P
	out := Ports[P]{All: make([]P, 0, len(snap.Ports()))}
	seen := 0 // applied ports that are still in snap
	for _, p := range snap.Ports() {
		if !include(p) {
			continue
		}
		old, ok := applied[p.Name]
		if ok {
			seen++
			if from, z := old.RenderedFrom(); z == zone && from.RendersSameAs(p) {
				out.All = append(out.All, old)
				continue
			}
		}
		cur := render(p)
		if cur != zero {
			out.All = append(out.All, cur)
			out.Changed = append(out.Changed, Change[P]{Old: old, Cur: cur})
		} else if ok {
			out.Removed = append(out.Removed, old) // it renders to nothing now
		}
	}
	if seen < len(applied) { // some left the Snapshot: find them
		in := make(map[service.PortName]bool, len(snap.Ports()))
		for _, p := range snap.Ports() {
			if include(p) {
				in[p.Name] = true
			}
		}
		for name, old := range applied {
			if !in[name] {
				out.Removed = append(out.Removed, old)
			}
		}
	}
	return out
}
