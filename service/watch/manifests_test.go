package watch

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

const svcYAML = `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 198.18.0.10
  ports:
  - {name: http, port: 80}
`

const sliceYAML = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [198.19.0.1]
ports:
- {name: http, port: 8080}
`

const deploymentYAML = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec: {}
`

// names lists objects as "Kind namespace/name".
func names(objs []runtime.Object) string {
	var out []string
	for _, obj := range objs {
		m, err := meta.Accessor(obj)
		if err != nil {
			out = append(out, fmt.Sprintf("%T", obj))
			continue
		}
		out = append(out, obj.GetObjectKind().GroupVersionKind().Kind+" "+m.GetNamespace()+"/"+m.GetName())
	}
	return strings.Join(out, ", ")
}

func TestLoadManifests(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    string   // names of the objects loaded
		errs    []string // each must appear in the error, in this order
		usable  bool     // only ErrUnsupportedKind errors: the objects are to be used
		noError bool
	}{{
		name: "empty", data: "", noError: true, usable: true,
	}, {
		name: "only comments and markers", data: "# nothing\n---\n---\n# still nothing\n", noError: true, usable: true,
	}, {
		name: "one service, namespace defaulted", data: svcYAML,
		want: "Service default/web", noError: true, usable: true,
	}, {
		name: "multi-document", data: "---\n" + svcYAML + "---\n" + sliceYAML + "...\n",
		want: "Service default/web, EndpointSlice shop/web-1", noError: true, usable: true,
	}, {
		name: "crlf line ends", data: strings.ReplaceAll(svcYAML+"---\n"+sliceYAML, "\n", "\r\n"),
		want: "Service default/web, EndpointSlice shop/web-1", noError: true, usable: true,
	}, {
		name: "v1 List",
		data: "apiVersion: v1\nkind: List\nitems:\n- " + strings.ReplaceAll(svcYAML, "\n", "\n  ") + "\n",
		want: "Service default/web", noError: true, usable: true,
	}, {
		name: "typed list, items without kind (API server JSON)",
		data: `{"apiVersion":"v1","kind":"ServiceList","items":[{"metadata":{"name":"a","namespace":"x"},"spec":{"ports":[{"port":1}]}}]}`,
		want: "Service x/a", noError: true, usable: true,
	}, {
		name: "json object", data: `{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"db"}}`,
		want: "Endpoints default/db", noError: true, usable: true,
	}, {
		name: "content after the marker", data: "--- {apiVersion: v1, kind: Service, metadata: {name: a}}\n",
		want: "Service default/a", noError: true, usable: true,
	}, {
		name: "unsupported kind: named, the rest loads",
		data: svcYAML + "---\n" + deploymentYAML + "---\n" + sliceYAML,
		want: "Service default/web, EndpointSlice shop/web-1",
		errs: []string{"f.yaml:10: apps/v1 Deployment default/web: unsupported kind"}, usable: true,
	}, {
		name: "syntax error in the third document: the file's line",
		data: svcYAML + "---\n" + sliceYAML + "---\n# a comment\napiVersion: v1\nkind: Service\nmetadata:\n  name: x\n   bad: indent\n",
		want: "Service default/web, EndpointSlice shop/web-1",
		errs: []string{"f.yaml:27: yaml: mapping values are not allowed"},
	}, {
		name: "duplicate key",
		data: "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n",
		errs: []string{"f.yaml:5: yaml: unmarshal errors:", `key "name" already set`},
	}, {
		name: "unknown field names the field",
		data: "# header\n\n" + strings.Replace(svcYAML, "clusterIP:", "clusterIp:", 1),
		errs: []string{`f.yaml:3: v1 Service default/web: unknown field "spec.clusterIp"`},
	}, {
		name: "wrong type names the field",
		data: strings.Replace(svcYAML, "port: 80", "port: eighty", 1),
		errs: []string{"f.yaml:1: v1 Service default/web: spec.ports[0].port: cannot unmarshal JSON string into Go int32"},
	}, {
		name: "no name", data: "apiVersion: v1\nkind: Service\nspec: {}\n",
		errs: []string{"f.yaml:1: v1 Service: metadata.name: required"},
	}, {
		name: "no kind", data: "metadata: {name: a}\n",
		errs: []string{"f.yaml:1: default/a: apiVersion and kind are required"},
	}, {
		name: "not an object", data: "- a\n- b\n",
		errs: []string{"f.yaml:1: not a Kubernetes object"},
	}, {
		name: "duplicate object",
		data: svcYAML + "---\n" + svcYAML,
		want: "Service default/web",
		errs: []string{"f.yaml:10: v1 Service default/web: duplicate of the object at line 1"},
	}, {
		name: "list items with kind first, or escapes, load too",
		data: `{"apiVersion":"v1","kind":"List","items":[{"kind":"Service","apiVersion":"v1","metadata":{"name":"a"}},{"apiVersion":"v\u0031","kind":"Service","metadata":{"name":"b"}},{ "apiVersion" : "v1" , "kind" : "Service" , "metadata":{"name":"c"}}]}`,
		want: "Service default/a, Service default/b, Service default/c", noError: true, usable: true,
	}, {
		name: "a second kind in an item is an error naming it",
		data: `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"kind":"Endpoints"}]}`,
		errs: []string{`f.yaml:1: items[0]: v1 Endpoints default/a: duplicate field "kind"`},
	}, {
		name: "an item without a name, apiVersion and kind leading",
		data: `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"x"}}]}`,
		errs: []string{"f.yaml:1: items[0]: v1 Service: metadata.name: required"},
	}, {
		name: "a node has no namespace",
		data: svcYAML + "---\n" + nodeYAML("node-a", "zone-1", ""),
		want: "Service default/web, Node /node-a", noError: true, usable: true,
	}, {
		name: "typed node list (API server JSON)",
		data: `{"apiVersion":"v1","kind":"NodeList","items":[{"metadata":{"name":"node-a"}},{"metadata":{"name":"node-b"}}]}`,
		want: "Node /node-a, Node /node-b", noError: true, usable: true,
	}, {
		name: "malformed node names the node and the field",
		data: svcYAML + "---\n" + strings.Replace(nodeYAML("node-a", "zone-1", ""), "taints:", "taint:", 1),
		want: "Service default/web",
		errs: []string{`f.yaml:10: v1 Node node-a: unknown field "spec.taint"`},
	}, {
		name: "node label of the wrong type names the field",
		data: "apiVersion: v1\nkind: Node\nmetadata:\n  name: node-a\n  labels: {topology.kubernetes.io/zone: [a]}\n",
		errs: []string{"f.yaml:1: v1 Node node-a: metadata.labels.topology.kubernetes.io/zone: cannot unmarshal"},
	}, {
		name: "list item error names the item",
		data: `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}},{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"p"}}]}`,
		want: "Service default/a",
		errs: []string{"f.yaml:1: items[1]: v1 ConfigMap default/p: unsupported kind"}, usable: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := LoadManifests("f.yaml", []byte(tt.data))
			if got := names(objs); got != tt.want {
				t.Errorf("objects = %q, want %q", got, tt.want)
			}
			if tt.noError != (err == nil) {
				t.Fatalf("err = %v, want error: %v", err, !tt.noError)
			}
			if got := onlyUnsupported(err); got != tt.usable {
				t.Errorf("onlyUnsupported = %v, want %v (err: %v)", got, tt.usable, err)
			}
			if err == nil {
				return
			}
			msg := err.Error()
			rest := msg
			for _, want := range tt.errs {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Errorf("error %q\nlacks %q (in order)", msg, want)
					break
				}
				rest = rest[i+len(want):]
			}
			var de *DocumentError
			if !errors.As(err, &de) || de.File != "f.yaml" || de.Line < 1 {
				t.Errorf("error %v is not a *DocumentError with file and line", err)
			}
		})
	}
}

func TestSplitDocumentsLines(t *testing.T) {
	data := "a: 1\n---\n\nb: 2\n--- # comment\nc: 3\n----\n---\td: 4\n"
	var got []string
	for _, d := range splitDocuments([]byte(data)) {
		got = append(got, fmt.Sprintf("%d:%q", d.line, d.data))
	}
	want := []string{`1:"a: 1\n"`, `3:"\nb: 2\n"`, `6:"c: 3\n----\n"`, `8:"    d: 4\n"`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("documents:\n got %s\nwant %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}
