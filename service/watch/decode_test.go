package watch

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/randfill"
)

// TestDecodeMatchesAPIServer: the loader's decoder (encoding/json/v2) gives
// the very object the API server's own decoder (sigs.k8s.io/json, strict, on
// top of encoding/json) gives, for Services, EndpointSlices and Endpoints
// with every field filled at random and written as kubectl writes them.
func TestDecodeMatchesAPIServer(t *testing.T) {
	fill := randfill.NewWithSeed(1).NilChance(0.2).NumElements(0, 3).Funcs(
		func(s *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*s = intstr.FromInt32(c.Int31())
			} else {
				*s = intstr.FromString(c.String(8))
			}
		},
		func(tm *metav1.Time, c randfill.Continue) {
			// Seconds: RFC 3339 as the API writes it has no fraction.
			*tm = metav1.NewTime(time.Unix(c.Int63n(1<<32), 0))
		},
		func(f *metav1.FieldsV1, c randfill.Continue) {
			f.Raw = []byte(`{"f:spec":{"f:ports":{}}}`)
		},
	)
	for _, kind := range []func() runtime.Object{
		func() runtime.Object { return &v1.Service{} },
		func() runtime.Object { return &discoveryv1.EndpointSlice{} },
		func() runtime.Object { return &v1.Endpoints{} },
	} {
		compared := 0
		for i := range 300 {
			obj := kind()
			fill.Fill(obj)
			gvk, _, err := scheme.ObjectKinds(obj)
			if err != nil {
				t.Fatal(err)
			}
			obj.GetObjectKind().SetGroupVersionKind(gvk[0])
			js, err := json.Marshal(obj)
			if err != nil {
				t.Fatalf("%T %d: %v", obj, i, err)
			}
			want := kind()
			if strict, err := kjson.UnmarshalStrict(js, want); err != nil || len(strict) > 0 {
				t.Fatalf("%T %d: the API server's decoder: %v %v", obj, i, err, strict)
			}
			got, _, err := decodeObject("", js, gvk[0])
			if name := want.(metav1.Object).GetName(); name == "" {
				if err == nil {
					t.Fatalf("%T %d: loaded without a name", obj, i)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%T %d: %v\n%s", obj, i, err, js)
			}
			if m := want.(metav1.Object); m.GetNamespace() == "" {
				m.SetNamespace(metav1.NamespaceDefault)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%T %d: decoded\n%+v\nthe API server decodes\n%+v\nfrom %s", obj, i, got, want, js)
			}
			compared++
		}
		if compared < 250 {
			t.Errorf("%T: only %d of 300 had a name to compare", kind(), compared)
		}
		t.Logf("%T: %d compared", kind(), compared)
	}
}
