package web

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/lab/views"
)

// fakeLab is a lab whose Services the test sets: a hybrid lab whose web
// port counts connections, first in userspace, then promoted.
type fakeLab struct {
	mu    sync.Mutex
	view  views.ServicesView
	err   error
	nodes []cluster.NodeView // a cluster's nodes: none unless a test sets them
}

func (f *fakeLab) Hosts() ([]topology.HostRow, error) {
	return []topology.HostRow{
		{Name: "node", Role: topology.RoleNode, Addr: "198.19.0.1", Runs: "svcproxy --mode hybrid"},
		{Name: "client", Role: topology.RoleClient, Addr: "198.19.1.2"},
		{Name: "web-0", Role: topology.RolePod, Addr: "198.19.1.10"},
		{Name: "web-1", Role: topology.RolePod, Addr: "198.19.1.11"},
	}, nil
}

func (f *fakeLab) Services(context.Context) (*views.ServicesView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	v := f.view
	v.Ports = append([]views.ServicePortView(nil), f.view.Ports...)
	return &v, nil
}

func (f *fakeLab) set(path string, userspace, kernel uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.view = views.ServicesView{Mode: "hybrid", Offload: "iptables", Ports: []views.ServicePortView{{
		Name: "default/web:http", Service: "default/web", Path: path, Userspace: userspace, Kernel: kernel,
		Endpoints: []views.EndpointView{{Addr: "198.19.1.10:8080", Pod: "web-0", Ready: true, Serving: true}},
	}}}
}

func (f *fakeLab) TraceReport(_ context.Context, opts views.TraceOptions) (*views.TraceReport, error) {
	if opts.Target != "web" {
		return nil, errors.New(`service "` + opts.Target + `": no such Service (the lab has web)`)
	}
	return &views.TraceReport{From: opts.From, Pick: opts.Pick, Src: "198.19.1.2", Dst: "198.18.0.20:80", Proto: "TCP", Port: "default/web:http",
		Hops:   []views.TraceHop{{Tracer: "iptables", Table: "nat", Chain: "PREROUTING", Rule: "-j SVCP-SERVICES"}, {Tracer: "iptables", Table: "nat", Chain: "SVCP-SEP-X", Note: "DNAT 198.19.1.10:8080"}},
		Result: "DNAT 198.19.1.10:8080"}, nil
}

func (f *fakeLab) ConntrackReport(_ context.Context, opts views.ConntrackOptions) (*views.ConntrackView, error) {
	if opts.Service != "web" {
		return nil, errors.New(`service "` + opts.Service + `": no such Service (the lab has web)`)
	}
	return &views.ConntrackView{Service: "default/web: ClusterIP 198.18.0.20, port http 80/TCP", Mode: "iptables", Entries: []views.ConntrackEntry{{
		Proto: "tcp", State: "TIME_WAIT", Sent: [2]string{"198.19.1.2:45894", "198.18.0.20:80"},
		Reply: [2]string{"198.19.1.12:8080", "198.19.1.2:45894"}, Timeout: 119, Means: "DNAT to 198.19.1.12 (web-2)"}}}, nil
}

// recorder is a Runner that records the commands and answers at once.
type recorder struct {
	mu   sync.Mutex
	runs [][]string
}

func (r *recorder) run(_ context.Context, args []string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, args)
	return "ok: " + strings.Join(args, " ") + "\n", nil
}

func TestTimelineMarksAPromotion(t *testing.T) {
	f := &fakeLab{}
	start := time.Unix(1000, 0)
	tl := timeline{start: start}
	for i, st := range []struct {
		path       string
		us, k      uint64
		wantUS, k2 float64
	}{
		{"userspace", 5, 0, 0, 0}, // the first view only sets the counters' base
		{"userspace", 25, 0, 20, 0},
		{"iptables", 30, 10, 5, 10},
		{"iptables", 30, 40, 0, 30},
		{"userspace", 2, 40, 2, 0}, // svcproxy restarted: its counter starts again
	} {
		f.set(st.path, st.us, st.k)
		v, _ := f.Services(context.Background())
		tl.add(start.Add(time.Duration(i)*time.Second), v)
		if i == 0 {
			require.Empty(t, tl.tl.Samples)
			continue
		}
		last := tl.tl.Samples[len(tl.tl.Samples)-1]
		require.Equal(t, Sample{T: float64(i), Userspace: st.wantUS, Kernel: st.k2}, last, "poll %d", i)
	}
	require.Equal(t, []Mark{
		{T: 2, Kind: "promotion", Port: "default/web:http", From: "userspace", To: "iptables"},
		{T: 4, Kind: "demotion", Port: "default/web:http", From: "iptables", To: "userspace"},
	}, tl.tl.Marks)
}

func TestControlArgs(t *testing.T) {
	hosts, _ := (&fakeLab{}).Hosts()
	tests := []struct {
		c       Control
		want    string
		wantErr string
	}{
		{Control{Action: "traffic", Target: "web", N: 200, Rate: 40}, "traffic --n 200 --rate 40 web", ""},
		{Control{Action: "traffic", Target: "udp://echo", N: 10, From: "web-0"}, "traffic --n 10 --from web-0 udp://echo", ""},
		{Control{Action: "pod", Pod: "web-1", Change: "ready=false"}, "pod web-1 --ready=false", ""},
		{Control{Action: "pod", Pod: "web-1", Change: "kill"}, "pod web-1 --kill", ""},
		{Control{Action: "mode", Mode: "nftables"}, "mode nftables", ""},
		{Control{Action: "traffic", Target: "web", N: 0}, "", "traffic: n 0: want 1 to 5000 requests"},
		{Control{Action: "traffic", Target: "web", N: 1, Rate: 1e6}, "", "traffic: rate 1e+06"},
		{Control{Action: "traffic", Target: "web", N: 1, From: "mars"}, "", `traffic: from "mars": no such lab host`},
		{Control{Action: "pod", Pod: "client", Change: "kill"}, "", `pod: pod "client": no such pod in the lab`},
		{Control{Action: "pod", Pod: "web-0", Change: "explode"}, "", `pod web-0: change "explode": want one of kill, start`},
		{Control{Action: "mode", Mode: "ebpf"}, "", `mode: mode "ebpf": want one of userspace`},
		{Control{Action: "rm"}, "", `action "rm": want traffic, pod or mode`},
	}
	for _, tt := range tests {
		args, err := tt.c.args(hosts)
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, strings.Join(args, " "))
	}
}

// newTestServer serves a Server over a fake lab, polled once.
func newTestServer(t *testing.T) (*Server, *fakeLab, *recorder, *httptest.Server) {
	t.Helper()
	f := &fakeLab{}
	f.set("userspace", 0, 0)
	rec := &recorder{}
	s := NewServer(Config{Lab: f, Run: rec.run, Prefix: "svclab"})
	s.poll(t.Context())
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, f, rec, ts
}

func getJSON(t *testing.T, url string, into any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.NoError(t, json.NewDecoder(resp.Body).Decode(into))
	return resp.StatusCode
}

func TestStateAndPage(t *testing.T) {
	s, f, _, ts := newTestServer(t)
	f.set("userspace", 30, 0)
	s.poll(t.Context())
	var st State
	require.Equal(t, http.StatusOK, getJSON(t, ts.URL+"/api/state", &st))
	require.Len(t, st.Hosts, 4)
	require.Equal(t, "hybrid", st.Services.Mode)
	require.Equal(t, uint64(30), st.Services.Ports[0].Userspace)
	require.Len(t, st.Timeline.Samples, 1)
	require.Positive(t, st.Timeline.Samples[0].Userspace)

	// A failed read keeps the last view and says why.
	f.mu.Lock()
	f.err = errors.New("svcproxy /status: connection refused")
	f.mu.Unlock()
	s.poll(t.Context())
	require.Equal(t, http.StatusOK, getJSON(t, ts.URL+"/api/state", &st))
	require.Equal(t, "svcproxy /status: connection refused", st.Error)
	require.NotNil(t, st.Services)

	for _, path := range []string{"/", "/app.js", "/packet.js", "/style.css"} {
		resp, err := http.Get(ts.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
}

func TestTrace(t *testing.T) {
	_, _, _, ts := newTestServer(t)
	var rep struct {
		Command string           `json:"command"`
		Hops    []views.TraceHop `json:"hops"`
		Result  string           `json:"result"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, ts.URL+"/api/trace?from=client&service=web", &rep))
	require.Equal(t, "svclab trace client web", rep.Command)
	require.Len(t, rep.Hops, 2)
	require.Equal(t, "DNAT 198.19.1.10:8080", rep.Result)

	var picked struct {
		Command string `json:"command"`
		Pick    int    `json:"pick"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, ts.URL+"/api/trace?from=client&service=web&pick=2", &picked))
	require.Equal(t, "svclab trace client web --pick 2", picked.Command)
	require.Equal(t, 2, picked.Pick)

	var e struct{ Error string }
	require.Equal(t, http.StatusBadRequest, getJSON(t, ts.URL+"/api/trace?from=client&service=web&pick=-1", &e))
	require.Contains(t, e.Error, `pick "-1"`)
	require.Equal(t, http.StatusBadRequest, getJSON(t, ts.URL+"/api/trace?from=client&service=nope", &e))
	require.Contains(t, e.Error, `service "nope": no such Service`)
	require.Equal(t, http.StatusBadRequest, getJSON(t, ts.URL+"/api/trace?from=client", &e))
	require.Contains(t, e.Error, "want from")
}

// A control runs its svclab command, and the events carry how it ended.
func TestRunAndEvents(t *testing.T) {
	_, _, rec, ts := newTestServer(t)
	resp, err := http.Get(ts.URL + "/api/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	events := make(chan State)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var st State
				if json.Unmarshal([]byte(data), &st) == nil {
					events <- st
				}
			}
		}
		close(events)
	}()
	first := <-events
	require.Equal(t, "hybrid", first.Services.Mode)

	post, err := http.Post(ts.URL+"/api/run", "application/json", strings.NewReader(`{"action":"pod","pod":"web-1","change":"ready=false"}`))
	require.NoError(t, err)
	var cmd Command
	require.NoError(t, json.NewDecoder(post.Body).Decode(&cmd))
	post.Body.Close()
	require.Equal(t, http.StatusAccepted, post.StatusCode)
	require.Equal(t, "svclab pod web-1 --ready=false", cmd.Command)
	for st := range events {
		if len(st.Commands) == 1 && !st.Commands[0].Running {
			require.Equal(t, "ok: pod web-1 --ready=false\n", st.Commands[0].Output)
			break
		}
	}
	rec.mu.Lock()
	require.Equal(t, [][]string{{"pod", "web-1", "--ready=false"}}, rec.runs)
	rec.mu.Unlock()

	bad, err := http.Post(ts.URL+"/api/run", "application/json", strings.NewReader(`{"action":"mode","mode":"ebpf"}`))
	require.NoError(t, err)
	var e struct{ Error string }
	require.NoError(t, json.NewDecoder(bad.Body).Decode(&e))
	bad.Body.Close()
	require.Equal(t, http.StatusBadRequest, bad.StatusCode)
	require.Contains(t, e.Error, `mode: mode "ebpf"`)
}

// Another web site open in the browser cannot run the controls (CSRF), nor
// reach the page by a name of its own pointed at 127.0.0.1 (DNS rebinding).
func TestForeignOriginsRefused(t *testing.T) {
	_, _, rec, ts := newTestServer(t)
	body := `{"action":"mode","mode":"iptables"}`
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/api/run", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Origin", "http://attacker.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	req, err = http.NewRequest(http.MethodGet, ts.URL+"/api/state", nil)
	require.NoError(t, err)
	req.Host = "rebound.attacker.example:8088"
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)

	req.Host = "localhost:8088"
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Empty(t, rec.runs)
}

func TestConntrack(t *testing.T) {
	_, _, _, ts := newTestServer(t)
	var rep struct {
		Command string                 `json:"command"`
		Entries []views.ConntrackEntry `json:"entries"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, ts.URL+"/api/conntrack?service=web", &rep))
	require.Equal(t, "svclab conntrack web", rep.Command)
	require.Len(t, rep.Entries, 1)
	require.Equal(t, "198.19.1.12:8080", rep.Entries[0].Reply[0])
	var e struct{ Error string }
	require.Equal(t, http.StatusBadRequest, getJSON(t, ts.URL+"/api/conntrack?service=nope", &e))
	require.Contains(t, e.Error, "no such Service")
}

// gate is a Runner whose commands run until the test lets each end, and
// that counts how many ran at once.
type gate struct {
	mu      sync.Mutex
	started []string
	now     int
	most    int
	release chan struct{}
}

func (g *gate) run(ctx context.Context, args []string) (string, error) {
	g.mu.Lock()
	g.started = append(g.started, strings.Join(args, " "))
	g.now++
	g.most = max(g.most, g.now)
	g.mu.Unlock()
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.now--
	g.mu.Unlock()
	return "ok\n", nil
}

// The controls run one at a time: a second one waits for the first, says
// so, and runs when it has ended; beyond maxWaiting, one is refused and
// says why.
func TestControlsQueue(t *testing.T) {
	f := &fakeLab{}
	f.set("userspace", 0, 0)
	g := &gate{release: make(chan struct{})}
	s := NewServer(Config{Lab: f, Run: g.run, Prefix: "svclab"})
	s.poll(t.Context())
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	post := func(body string) (int, Command, string) {
		t.Helper()
		resp, err := http.Post(ts.URL+"/api/run", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var c struct {
			Command
			Error string `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&c))
		return resp.StatusCode, c.Command, c.Error
	}
	code, first, _ := post(`{"action":"pod","pod":"web-1","change":"ready=false"}`)
	require.Equal(t, http.StatusAccepted, code)
	require.True(t, first.Running)
	code, second, _ := post(`{"action":"mode","mode":"iptables"}`)
	require.Equal(t, http.StatusAccepted, code)
	require.True(t, second.Queued)
	require.False(t, second.Running)
	require.Equal(t, first.ID, second.After)
	for range maxWaiting - 1 {
		code, _, _ = post(`{"action":"traffic","target":"web","n":1}`)
		require.Equal(t, http.StatusAccepted, code)
	}
	code, _, msg := post(`{"action":"traffic","target":"web","n":1}`)
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Contains(t, msg, "refused: 4 commands wait already behind #1; the controls run one at a time")

	var st State
	getJSON(t, ts.URL+"/api/state", &st)
	require.Len(t, st.Commands, 1+maxWaiting)
	require.True(t, st.Commands[1].Queued, "the state shows the second command queued")

	for range 1 + maxWaiting {
		g.release <- struct{}{}
	}
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.running == 0 && len(s.waiting) == 0
	}, 5*time.Second, 10*time.Millisecond)
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(t, 1, g.most, "the commands ran one at a time")
	require.Equal(t, []string{"pod web-1 --ready=false", "mode iptables", "traffic --n 1 web", "traffic --n 1 web", "traffic --n 1 web"}, g.started)
	getJSON(t, ts.URL+"/api/state", &st)
	for _, c := range st.Commands {
		require.False(t, c.Queued || c.Running, "command %d ended", c.ID)
		require.Equal(t, "ok\n", c.Output)
	}
}
