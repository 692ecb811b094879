package web

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/views"
)

//go:embed static
var static embed.FS

// Config is what a Server serves.
type Config struct {
	Lab Lab
	// Run runs the controls' svclab commands.
	Run Runner
	// Prefix is how the page writes the commands it ran: "svclab", or
	// "svclab --state /tmp/lab" when the lab is not in the default place.
	Prefix string
	// Every is how often the lab is read (default one second).
	Every time.Duration
}

// Server serves the page, its JSON endpoints and the events.
type Server struct {
	cfg   Config
	start time.Time

	mu       sync.Mutex
	tl       timeline
	state    State
	changed  chan struct{} // closed, and replaced, at each new state
	commands []Command
	// running is the ID of the command that runs now (0: none); waiting
	// are the commands queued behind it, in order.
	running int
	waiting []queued
}

// queued is a command waiting for its turn.
type queued struct {
	id   int
	args []string
}

// NewServer makes a Server; Run starts its poller.
func NewServer(cfg Config) *Server {
	if cfg.Every == 0 {
		cfg.Every = time.Second
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "svclab"
	}
	now := time.Now()
	return &Server{cfg: cfg, start: now, tl: timeline{start: now}, changed: make(chan struct{})}
}

// Handler serves:
//
//	/                 the page (static/index.html, app.js, style.css)
//	GET /api/state    the latest State
//	GET /api/events   the States as server-sent events ("state")
//	GET /api/trace    ?from=HOST&service=SERVICE[:PORT][&pick=N]: a views.TraceReport
//	GET /api/conntrack ?service=SERVICE: a views.ConntrackView
//	POST /api/run     a Control; answers the Command it started or queued
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	root, _ := fs.Sub(static, "static")
	mux.Handle("GET /", http.FileServerFS(root))
	mux.HandleFunc("GET /api/state", s.getState)
	mux.HandleFunc("GET /api/events", s.events)
	mux.HandleFunc("GET /api/trace", s.trace)
	mux.HandleFunc("GET /api/conntrack", s.conntrack)
	mux.HandleFunc("POST /api/run", s.run)
	// The controls run commands as root: another web site open in the
	// same browser must not be able to post to them (CSRF), nor to read
	// the page through a name of its own that resolves to 127.0.0.1 (DNS
	// rebinding).
	return http.NewCrossOriginProtection().Handler(addressedByIP(mux))
}

// addressedByIP refuses requests whose Host is a name other than
// localhost: the page is reached as 127.0.0.1:8088, localhost:8088 or
// another IP address, and a name that a foreign DNS server points at
// 127.0.0.1 is how DNS rebinding reaches a loopback server from a web
// site's script.
func addressedByIP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err != nil && host != "localhost" {
			http.Error(w, fmt.Sprintf("host %q: svclab web answers only to an IP address or localhost", r.Host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Run reads the lab every cfg.Every until ctx ends (the poller: the one
// goroutine that reads the lab for every page open).
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		s.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll reads the lab once and publishes the new State.
func (s *Server) poll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hosts, herr := s.cfg.Lab.Hosts()
	nodes, nerr := s.cfg.Lab.Nodes(ctx)
	view, verr := s.cfg.Lab.Services(ctx)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	st.At = now
	st.Error = ""
	if err := errors.Join(herr, nerr, verr); err != nil {
		st.Error = err.Error()
	}
	if herr == nil {
		st.Hosts = hosts
	}
	if nerr == nil {
		st.Nodes = nodes
	}
	if verr == nil {
		st.Services = view
		s.tl.add(now, view)
	}
	st.Timeline = s.tl.snapshot()
	st.Commands = s.recentLocked()
	st.Modes = cluster.Modes
	s.publishLocked(st)
}

// publishLocked makes st the latest State and wakes every event stream.
func (s *Server) publishLocked(st State) {
	s.state = st
	close(s.changed)
	s.changed = make(chan struct{})
}

// latest is the latest State and the channel closed at the next.
func (s *Server) latest() (State, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.changed
}

func (s *Server) getState(w http.ResponseWriter, _ *http.Request) {
	st, _ := s.latest()
	writeJSON(w, http.StatusOK, st)
}

// events streams each new State as a server-sent event until the page
// goes away. "retry: 1000" asks EventSource to reconnect after a second.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fmt.Fprint(w, "retry: 1000\n\n")
	for {
		st, next := s.latest()
		if !st.At.IsZero() {
			b, err := json.Marshal(st)
			if err != nil {
				return
			}
			fmt.Fprintf(w, "event: state\ndata: %s\n\n", b)
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-next:
		}
	}
}

// trace answers what `svclab trace FROM SERVICE` prints, as data.
func (s *Server) trace(w http.ResponseWriter, r *http.Request) {
	from, svc := r.URL.Query().Get("from"), r.URL.Query().Get("service")
	if from == "" || svc == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "trace: want from (a lab host) and service (web, web:http, udp://echo)"})
		return
	}
	opts := views.TraceOptions{From: from, Target: svc}
	command := s.cfg.Prefix + " trace " + from + " " + svc
	if p := r.URL.Query().Get("pick"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > maxPick {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("trace: pick %q: want a way's number, 0 to %d", p, maxPick)})
			return
		}
		opts.Pick = n
		if n > 0 {
			command += " --pick " + p
		}
	}
	rep, err := s.cfg.Lab.TraceReport(r.Context(), opts)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Command string `json:"command"`
		*views.TraceReport
	}{command, rep})
}

// maxPick bounds a trace's --pick: a Service has far fewer endpoints.
const maxPick = 1000

// conntrack answers what `svclab conntrack SERVICE` prints, as data.
func (s *Server) conntrack(w http.ResponseWriter, r *http.Request) {
	svc := r.URL.Query().Get("service")
	rep, err := s.cfg.Lab.ConntrackReport(r.Context(), views.ConntrackOptions{Service: svc})
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	command := s.cfg.Prefix + " conntrack"
	if svc != "" {
		command += " " + svc
	}
	writeJSON(w, http.StatusOK, struct {
		Command string `json:"command"`
		*views.ConntrackView
	}{command, rep})
}

// maxWaiting bounds the commands queued behind the running one: a few
// clicks ahead, not a flood.
const maxWaiting = 4

// run starts the svclab command of a Control, or queues it behind the one
// that runs, and answers at once with the Command; its output comes with
// the next States.
//
// The controls run one at a time. Two at once fail falsely: a mode change
// restarts svcproxy while a pod change waits for svcproxy to apply it, and
// traffic sent across a restart is refused. In a queue each runs on the lab
// the one before left, as the same commands typed one after the other do.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	var c Control
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&c); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "control: " + err.Error()})
		return
	}
	st, _ := s.latest()
	args, err := c.args(st.Hosts)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) >= maxWaiting {
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": fmt.Sprintf(
			"refused: %d commands wait already behind #%d; the controls run one at a time", maxWaiting, s.running)})
		return
	}
	cmd := Command{ID: len(s.commands) + 1, Command: s.cfg.Prefix + " " + strings.Join(args, " ")}
	if s.running == 0 {
		cmd.Running, cmd.Started = true, time.Now()
		s.running = cmd.ID
		s.commands = append(s.commands, cmd)
		// The command belongs to the server, not to the request: it goes
		// on when the page is closed, and a mode change is never cut in
		// half.
		go s.runCommand(context.WithoutCancel(r.Context()), cmd.ID, args)
	} else {
		cmd.Queued, cmd.After = true, s.running
		if n := len(s.waiting); n > 0 {
			cmd.After = s.waiting[n-1].id
		}
		s.waiting = append(s.waiting, queued{cmd.ID, args})
		s.commands = append(s.commands, cmd)
	}
	st = s.state
	st.Commands = s.recentLocked()
	s.publishLocked(st)
	writeJSON(w, http.StatusAccepted, cmd)
}

// runCommand runs one control's command, records how it ended, and starts
// the next one waiting.
func (s *Server) runCommand(ctx context.Context, id int, args []string) {
	out, err := s.cfg.Run(ctx, args)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &s.commands[id-1]
	c.Running, c.Output = false, out
	if err != nil {
		c.Error = err.Error()
	}
	s.running = 0
	if len(s.waiting) > 0 {
		next := s.waiting[0]
		s.waiting = s.waiting[1:]
		n := &s.commands[next.id-1]
		n.Queued, n.Running, n.Started = false, true, time.Now()
		s.running = next.id
		go s.runCommand(ctx, next.id, next.args)
	}
	st := s.state
	st.Commands = s.recentLocked()
	s.publishLocked(st)
}

// shownCommands is how many of the last commands the States carry.
const shownCommands = 10

// recentLocked is a copy of the last shownCommands commands.
func (s *Server) recentLocked() []Command {
	return append([]Command(nil), s.commands[max(0, len(s.commands)-shownCommands):]...)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
