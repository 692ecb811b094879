package watch

import (
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/service"
)

// TestAPIClientProtobuf lists and watches a real API server with the
// package's own client, and checks that the server answered in protobuf and
// that the answers decode into the objects that were written.
func TestAPIClientProtobuf(t *testing.T) {
	srv := kapitest.Start(t)
	ns := srv.Namespace(t)
	rc, err := clientcmd.BuildConfigFromFlags("", srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	types := &contentTypes{seen: make(map[string]string)}
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return types.recorder(rt) })
	lw, err := apiListWatchers(rc, selection{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	web := testService("web", "198.18.0.10", 80)
	web.Namespace = ns
	if _, err := srv.Client.CoreV1().Services(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A protobuf list arrives converted (list.go).
	list, err := lw.services.List(metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list services: %v", err)
	}
	snap := joinList(t, list, nil)
	if svc, ok := snap.Service(service.NamespacedName{Namespace: ns, Name: "web"}); !ok || len(svc.ClusterIPs) != 1 || svc.ClusterIPs[0] != netip.MustParseAddr("198.18.0.10") {
		t.Errorf("list of services: %s/web 198.18.0.10 not in it (%v)", ns, svc)
	}

	slices, err := lw.slices.List(metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list endpointslices: %v", err)
	}
	lm, err := meta.ListAccessor(slices)
	if err != nil {
		t.Fatal(err)
	}
	w, err := lw.slices.Watch(metav1.ListOptions{ResourceVersion: lm.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watch endpointslices: %v", err)
	}
	defer w.Stop()
	es := testSlice("web-1", "web", "198.19.0.1")
	es.Namespace = ns
	if _, err := srv.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		got, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok || got.Name != "web-1" || len(got.Endpoints) != 1 || got.Endpoints[0].Addresses[0] != "198.19.0.1" {
			t.Errorf("watch event %s %#v, want the ADDED web-1 with 198.19.0.1", ev.Type, ev.Object)
		}
	case <-time.After(deadline):
		t.Fatal("no watch event for the new EndpointSlice")
	}

	// Errors come as a Status in protobuf too, and must decode as one: the
	// reflector tells a 410 Gone (relist) from other errors by it (client-go
	// tools/cache/reflector.go). A missing object is the error a test can
	// cause at will.
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	core, err := restClient(rc, hc, "/api", v1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	err = core.Get().Namespace(ns).Resource("services").Name("missing").Do(ctx).Error()
	if !apierrors.IsNotFound(err) {
		t.Errorf("GET a missing service: %v, want a NotFound Status", err)
	}
	if ct := types.get("/api/v1/namespaces/" + ns + "/services/missing"); !strings.HasPrefix(ct, protobuf) {
		t.Errorf("the NotFound Status came in %q, want %s", ct, protobuf)
	}

	for _, path := range []string{"/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices", "/apis/discovery.k8s.io/v1/endpointslices?watch"} {
		if ct := types.get(path); !strings.HasPrefix(ct, protobuf) {
			t.Errorf("GET %s answered in %q, want %s", path, ct, protobuf)
		}
	}
}

// contentTypes records the Content-Type of each answer by request path
// (with "?watch" for watches).
type contentTypes struct {
	mu   sync.Mutex
	seen map[string]string
}

func (c *contentTypes) recorder(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			key := req.URL.Path
			if req.URL.Query().Get("watch") == "true" {
				key += "?watch"
			}
			c.mu.Lock()
			c.seen[key] = resp.Header.Get("Content-Type")
			c.mu.Unlock()
		}
		return resp, err
	})
}

func (c *contentTypes) get(path string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[path]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// --master names the API server over the kubeconfig's, as kube-proxy's
// createClient does, and alone needs no kubeconfig.
func TestRestConfigMaster(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	doc := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://198.19.0.1:6443\"}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: t}\n"
	if err := os.WriteFile(kc, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, master, want string }{
		{kc, "", "https://198.19.0.1:6443"},
		{kc, "https://198.19.0.9:6443", "https://198.19.0.9:6443"},
		{"", "http://127.0.0.1:8080", "http://127.0.0.1:8080"},
	} {
		rc, err := restConfig(tt.path, tt.master)
		if err != nil {
			t.Fatalf("restConfig(%q, %q): %v", tt.path, tt.master, err)
		}
		if rc.Host != tt.want {
			t.Errorf("restConfig(%q, %q): host %q, want %q", tt.path, tt.master, rc.Host, tt.want)
		}
		// A connect that cannot succeed (a SYN to a ClusterIP sent before
		// the node's proxy wrote its rules) ends before client-go's 30 s.
		if rc.Dial == nil {
			t.Errorf("restConfig(%q, %q): client-go's dialer, with its 30 s connect timeout", tt.path, tt.master)
		}
	}
}
