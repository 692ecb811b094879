package lab

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// services parses the v1 Services of a multi-document manifests file.
func services(t *testing.T, manifests []byte) map[string]corev1.Service {
	t.Helper()
	out := map[string]corev1.Service{}
	for _, doc := range bytes.Split(manifests, []byte("\n---\n")) {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind != "Service" {
			continue
		}
		var s corev1.Service
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			t.Fatal(err)
		}
		out[s.Namespace+"/"+s.Name] = s
	}
	return out
}

// TestClusterServices checks the control-plane lab has the file-fed lab's
// Services, field for field, so that tutorials hold on both. kube-dns is the
// exception: the control-plane lab gets it from deploy/lab.
func TestClusterServices(t *testing.T) {
	file := services(t, Manifests)
	delete(file, "kube-system/kube-dns")
	cluster := services(t, Cluster)
	if len(file) == 0 || !reflect.DeepEqual(file, cluster) {
		t.Errorf("the Services of cluster.yaml and manifests.yaml differ:\nmanifests.yaml: %v\ncluster.yaml:   %v", keys(file), keys(cluster))
	}
}

func keys(m map[string]corev1.Service) string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return strings.Join(k, " ")
}

func TestPodHost(t *testing.T) {
	tests := []struct{ ns, name, host, link string }{
		{"default", "web-3", "web-3", "veth-web-3"},
		{"default", "web-12", "web-12", "veth-web-12"},
		{"shop", "cart-0", "cart-0.shop", "veth"},
		{"default", "frontend-7d9c5b-x2x8q", "frontend-7d9c5b-x2x8q", "veth"},
	}
	for _, tt := range tests {
		host := podHostName(tt.ns, tt.name)
		link := nodeLinkName(host)
		if host != tt.host || !strings.HasPrefix(link, tt.link) || len(link) > 15 {
			t.Errorf("pod %s/%s: host %q link %q, want host %q and a link of at most 15 bytes starting %q", tt.ns, tt.name, host, link, tt.host, tt.link)
		}
	}
}
