package web

import (
	"context"
	"time"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/lab/views"
)

// Lab is what the page reads of the lab: *lab.Lab, or a fake in tests
// (the kernel boundary of this package: every reader runs commands in the
// lab's node).
type Lab interface {
	Hosts() ([]topology.HostRow, error)
	// Nodes are the cluster's nodes and their pods as the API server has
	// them: none on a lab without a control plane.
	Nodes(ctx context.Context) ([]cluster.NodeView, error)
	Services(ctx context.Context) (*views.ServicesView, error)
	TraceReport(ctx context.Context, opts views.TraceOptions) (*views.TraceReport, error)
	ConntrackReport(ctx context.Context, opts views.ConntrackOptions) (*views.ConntrackView, error)
}

var _ Lab = (*lab.Lab)(nil)

// State is the document each server-sent event carries, and GET
// /api/state answers.
type State struct {
	At    time.Time          `json:"at"`
	Hosts []topology.HostRow `json:"hosts"`
	// Nodes are the cluster's nodes, each with the pods bound to it (the
	// page's "which pod runs where"); empty without a control plane.
	Nodes    []cluster.NodeView  `json:"nodes"`
	Services *views.ServicesView `json:"services"`
	Timeline Timeline            `json:"timeline"`
	Commands []Command           `json:"commands"`
	// Modes are the modes `svclab mode` takes, for the page's control.
	Modes []string `json:"modes"`
	// Error is why the last poll read nothing (the lab is down, svcproxy
	// restarts); the page shows it and keeps the last state.
	Error string `json:"error,omitempty"`
}

// Timeline is hybrid's timeline as the page draws it: new connections per
// second by path, and the moments a port changed path.
type Timeline struct {
	Samples []Sample `json:"samples"`
	Marks   []Mark   `json:"marks"`
}

// Sample is the connections per second between two polls, T seconds after
// the server started, summed over every service port.
type Sample struct {
	T         float64 `json:"t"`
	Userspace float64 `json:"userspace"` // opened by svcproxy's userspace proxy
	Kernel    float64 `json:"kernel"`    // counted by the kernel's rules
}

// Mark is a port's change of path: a hybrid promotion (userspace to the
// kernel), a demotion (back), or a change of mode (svclab mode).
type Mark struct {
	T    float64 `json:"t"`
	Kind string  `json:"kind"` // "promotion", "demotion" or "mode"
	Port string  `json:"port,omitempty"`
	From string  `json:"from"`
	To   string  `json:"to"`
}

// keep is how many samples the timeline keeps: two minutes at one a second.
const keep = 120

// timeline turns successive ServicesViews into Samples and Marks.
type timeline struct {
	start time.Time
	last  *views.ServicesView
	lastT float64
	tl    Timeline
}

// add takes the view read at t. A counter that went down (svcproxy
// restarted, the kernel's rules were re-created) starts again from zero.
func (w *timeline) add(t time.Time, v *views.ServicesView) {
	now := t.Sub(w.start).Seconds()
	prev, prevT := w.last, w.lastT
	w.last, w.lastT = v, now
	if prev == nil {
		return
	}
	if prev.Mode != v.Mode {
		w.mark(Mark{T: now, Kind: "mode", From: prev.Mode, To: v.Mode})
	}
	before := map[string]views.ServicePortView{}
	for _, p := range prev.Ports {
		before[p.Name] = p
	}
	var us, k uint64
	for _, p := range v.Ports {
		b, ok := before[p.Name]
		if !ok {
			continue
		}
		us += grew(b.Userspace, p.Userspace)
		k += grew(b.Kernel, p.Kernel)
		if prev.Mode == v.Mode && b.Path != p.Path {
			kind := "promotion"
			if p.Path == "userspace" {
				kind = "demotion"
			}
			w.mark(Mark{T: now, Kind: kind, Port: p.Name, From: b.Path, To: p.Path})
		}
	}
	dt := now - prevT
	w.tl.Samples = append(w.tl.Samples, Sample{T: now, Userspace: perSecond(us, dt), Kernel: perSecond(k, dt)})
	if n := len(w.tl.Samples); n > keep {
		w.tl.Samples = w.tl.Samples[n-keep:]
		first := w.tl.Samples[0].T
		for len(w.tl.Marks) > 0 && w.tl.Marks[0].T < first {
			w.tl.Marks = w.tl.Marks[1:]
		}
	}
}

func (w *timeline) mark(m Mark) { w.tl.Marks = append(w.tl.Marks, m) }

// grew is how much a counter grew from a to b; b when it went down.
func grew(a, b uint64) uint64 {
	if b < a {
		return b
	}
	return b - a
}

func perSecond(n uint64, dt float64) float64 {
	if dt <= 0 {
		return 0
	}
	return float64(n) / dt
}

// snapshot is a copy of the timeline the poller may go on changing.
func (w *timeline) snapshot() Timeline {
	return Timeline{Samples: append([]Sample(nil), w.tl.Samples...), Marks: append([]Mark(nil), w.tl.Marks...)}
}
