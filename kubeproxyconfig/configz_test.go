package kubeproxyconfig

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"k8s.io/kube-proxy/config/v1alpha1"
)

// /configz is the configuration in force under its group's name, and decodes
// back to the same object.
func TestConfigz(t *testing.T) {
	cfg, err := Load("testdata/everything.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Configz(cfg))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/configz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/json" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
	}
	var got map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	raw, ok := got["kubeproxy.config.k8s.io"]
	if len(got) != 1 || !ok {
		t.Fatalf("keys %v, want kubeproxy.config.k8s.io alone", reflect.ValueOf(got).MapKeys())
	}
	back, err := Decode(raw, "/configz")
	if err != nil {
		t.Fatal(err)
	}
	want := cfg.DeepCopy()
	want.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("KubeProxyConfiguration"))
	if !reflect.DeepEqual(back, want) {
		t.Errorf("/configz decodes to\n%+v\nwant\n%+v", back, want)
	}
}
