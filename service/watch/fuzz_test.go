package watch

import (
	"bytes"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
)

// FuzzLoadManifests feeds the loader arbitrary files. It must not panic; every
// error must be a *DocumentError pointing into the file; every object loaded
// must be a supported kind with a name and a namespace. The seeds (here and
// in testdata/fuzz/FuzzLoadManifests) run in every plain `go test`.
func FuzzLoadManifests(f *testing.F) {
	for _, seed := range []string{
		"",
		svcYAML,
		sliceYAML,
		endpointsYAML,
		svcYAML + "---\n" + deploymentYAML + "---\n" + sliceYAML,
		"apiVersion: v1\nkind: List\nitems:\n- " + "{apiVersion: v1, kind: Service, metadata: {name: a}}\n",
		`{"apiVersion":"v1","kind":"ServiceList","items":[{"metadata":{"name":"a"}}]}`,
		"--- {apiVersion: v1, kind: Service, metadata: {name: a}}\n...\n",
		"a: &x [*x]\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: x}]}\n",
		"\xef\xbb\xbfapiVersion: v1\r\nkind: Service\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := LoadManifests("fuzz.yaml", data)
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, e := range unjoin(err) {
			var de *DocumentError
			if !errors.As(e, &de) {
				t.Fatalf("error %v (%T) is not a *DocumentError", e, e)
			}
			if de.File != "fuzz.yaml" || de.Line < 1 || de.Line > lines {
				t.Fatalf("error %v points at line %d of a %d-line file", e, de.Line, lines)
			}
		}
		for _, obj := range objs {
			if !supported[obj.GetObjectKind().GroupVersionKind()] {
				t.Fatalf("loaded an unsupported %T %v", obj, obj.GetObjectKind().GroupVersionKind())
			}
			m, err := meta.Accessor(obj)
			if err != nil || m.GetName() == "" || m.GetNamespace() == "" {
				t.Fatalf("loaded %T without name or namespace: %v", obj, err)
			}
		}
		// What loads, applies: built into a Snapshot.
		f := &fileSource{fileConfig: fileConfig{counts: &changeCounts{}}, changed: func() {}}
		f.put(objs)
	})
}
