package watch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/svcproxy/svcproxy/service"
)

// encode encodes obj as the API server does for an Accept of protobuf or JSON.
func encode(t *testing.T, obj runtime.Object, mediaType string, gv schema.GroupVersion) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(serializer.NewCodecFactory(scheme).SupportedMediaTypes(), mediaType)
	if !ok {
		t.Fatalf("no serializer for %s", mediaType)
	}
	data, err := runtime.Encode(serializer.NewCodecFactory(scheme).EncoderForVersion(info.Serializer, gv), obj)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// joinList is the Snapshot of a list of Services and one of slices, each a
// decodedList or an API list (converted here as the transform would).
func joinList(t *testing.T, services, slices runtime.Object) *service.Snapshot {
	t.Helper()
	var svcs []*service.ServiceObject
	var ess []*service.SliceObject
	for _, list := range []runtime.Object{services, slices} {
		if list == nil {
			continue
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			c, err := compact(it)
			if err != nil {
				t.Fatal(err)
			}
			switch o := c.(type) {
			case *cachedService:
				svcs = append(svcs, o.obj)
			case *cachedSlice:
				ess = append(ess, o.obj)
			default:
				t.Fatalf("list item %T", c)
			}
		}
	}
	return service.Join(svcs, ess, nil)
}

// manyServices is a ServiceList of n Services svc-0 ... in namespace ns, with
// EndpointSlices for each; n above minItemsPerWorker decodes in parallel.
func manyServices(n int) (*v1.ServiceList, *discoveryv1.EndpointSliceList) {
	svcs := &v1.ServiceList{ListMeta: metav1.ListMeta{ResourceVersion: "42"}}
	slices := &discoveryv1.EndpointSliceList{ListMeta: metav1.ListMeta{ResourceVersion: "43"}}
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		s := testService(name, fmt.Sprintf("198.18.%d.%d", i/250, i%250+1), 80)
		s.Annotations = map[string]string{"svcproxy.io/ipvs-scheduler": "wrr", "other": "dropped"}
		svcs.Items = append(svcs.Items, *s)
		slices.Items = append(slices.Items, *testSlice(name+"-1", name, fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)))
	}
	bad := testService("bad", "not-an-ip", 80)
	svcs.Items = append(svcs.Items, *bad)
	return svcs, slices
}

// TestDecodeList checks that a protobuf list decoded item by item (list.go)
// makes the Snapshot that client-go's decoding and the transform make, keeps
// the list's resource version, and that anything else is left to the
// client's serializer.
func TestDecodeList(t *testing.T) {
	svcs, slices := manyServices(300)
	svcData := encode(t, svcs, protobuf, v1.SchemeGroupVersion)
	sliceData := encode(t, slices, protobuf, discoveryv1.SchemeGroupVersion)

	gotSvcs, ok, err := decodeList(svcData, serviceList)
	if !ok || err != nil {
		t.Fatalf("decode ServiceList: ok %v, %v", ok, err)
	}
	gotSlices, ok, err := decodeList(sliceData, sliceList)
	if !ok || err != nil {
		t.Fatalf("decode EndpointSliceList: ok %v, %v", ok, err)
	}
	if gotSvcs.ResourceVersion != "42" || gotSlices.ResourceVersion != "43" || len(gotSvcs.Items) != 301 || len(gotSlices.Items) != 300 {
		t.Fatalf("decoded lists: resource versions %q, %q, %d and %d items; want 42, 43, 301 and 300",
			gotSvcs.ResourceVersion, gotSlices.ResourceVersion, len(gotSvcs.Items), len(gotSlices.Items))
	}
	if c := gotSvcs.Items[7].(*cachedService); c.namespace != "default" || c.name != "svc-7" {
		t.Errorf("items[7] is %s/%s, want default/svc-7 (the list's order)", c.namespace, c.name)
	}
	got, want := joinList(t, gotSvcs, gotSlices), joinList(t, svcs, slices)
	if g, w := describe(got), describe(want); g != w {
		t.Errorf("Snapshot of the decoded lists:\n%s\nwant (client-go's decoding):\n%s", g, w)
	}
	if g, w := fmt.Sprint(got.Errors()), fmt.Sprint(want.Errors()); g != w || !strings.Contains(g, "default/bad") {
		t.Errorf("errors %s, want %s", g, w)
	}
	if a := got.Services()[0].Annotations; len(a) != 1 || a["svcproxy.io/ipvs-scheduler"] != "wrr" {
		t.Errorf("annotations %v, want only svcproxy.io/ipvs-scheduler", a)
	}

	// Not ours to decode: JSON, another kind, a truncated list.
	for name, data := range map[string][]byte{
		"JSON":                   encode(t, svcs, "application/json", v1.SchemeGroupVersion),
		"slices as services":     sliceData,
		"a Status":               encode(t, &metav1.Status{Status: metav1.StatusFailure, Code: 410}, protobuf, v1.SchemeGroupVersion),
		"truncated envelope":     svcData[:len(svcData)/2],
		"nothing but magic":      protobufMagic,
		"services with no magic": svcData[4:],
	} {
		if l, ok, err := decodeList(data, serviceList); ok || l != nil || err != nil {
			t.Errorf("%s: decoded (ok %v, %v), want it left to the serializer", name, ok, err)
		}
	}

	// A broken item in a list of the right kind is an error that names it.
	one := &v1.ServiceList{Items: []v1.Service{*testService("web", "198.18.0.10", 80)}}
	data := encode(t, one, protobuf, v1.SchemeGroupVersion)
	i := strings.Index(string(data), "198.18.0.10")
	data[i-1] = 0xff // the length of the clusterIP string
	if _, ok, err := decodeList(data, serviceList); !ok || err == nil || !strings.Contains(err.Error(), "items[0]") {
		t.Errorf("a broken item: ok %v, error %v; want an error naming items[0]", ok, err)
	}
}

// TestListConvertedFallsBackToJSON lists from a server that answers in JSON
// (one that does not speak protobuf): the list is client-go's, decoded by the
// client's serializer, and the transform converts it as before.
func TestListConvertedFallsBackToJSON(t *testing.T) {
	svcs, _ := manyServices(3)
	for _, tc := range []struct {
		contentType string
		want        string
	}{
		{"application/json", "*v1.ServiceList"},
		{protobuf, "*watch.decodedList"},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			body := encode(t, svcs, tc.contentType, v1.SchemeGroupVersion)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/api/v1/services" || r.URL.Query().Get("resourceVersion") != "0" {
					http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
					return
				}
				w.Header().Set("Content-Type", tc.contentType)
				w.Write(body)
			}))
			defer srv.Close()
			rc := &rest.Config{Host: srv.URL}
			hc, err := rest.HTTPClientFor(rc)
			if err != nil {
				t.Fatal(err)
			}
			core, err := restClient(rc, hc, "/api", v1.SchemeGroupVersion)
			if err != nil {
				t.Fatal(err)
			}
			list, err := listWatch(core, serviceList, selection{}.serviceOptions).List(metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%T", list); got != tc.want {
				t.Errorf("list is a %s, want %s", got, tc.want)
			}
			if got, want := describe(joinList(t, list, nil)), describe(joinList(t, svcs, nil)); got != want {
				t.Errorf("Snapshot:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestReadAnswer checks that an answer is read whole, however it arrives,
// and that a protobuf list is read into one buffer of the size its envelope
// announces, never grown.
func TestReadAnswer(t *testing.T) {
	svcs, _ := manyServices(300)
	pb := encode(t, svcs, protobuf, v1.SchemeGroupVersion)
	if size := answerSize(pb[:256]); size < len(pb) || size > len(pb)+envelopeTail {
		t.Errorf("answerSize %d for an answer of %d bytes, want at least that and at most %d more", size, len(pb), envelopeTail)
	}
	for name, data := range map[string][]byte{
		"protobuf":  pb,
		"JSON":      encode(t, svcs, "application/json", v1.SchemeGroupVersion),
		"short":     pb[:100],
		"empty":     nil,
		"truncated": pb[:len(pb)/2],
	} {
		for _, r := range []struct {
			how string
			r   io.Reader
		}{{"at once", bytes.NewReader(data)}, {"a byte at a time", iotest.OneByteReader(bytes.NewReader(data))}} {
			got, err := readAnswer(r.r)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s, %s: read %d bytes (%v), want the %d sent", name, r.how, len(got), err, len(data))
			}
			if name == "protobuf" && cap(got) != answerSize(pb)+bytes.MinRead {
				t.Errorf("%s, %s: buffer of %d bytes, want %d (the announced size, never grown)", name, r.how, cap(got), answerSize(pb)+bytes.MinRead)
			}
		}
	}
	if _, err := readAnswer(iotest.ErrReader(io.ErrClosedPipe)); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("a failing body: %v, want its error", err)
	}
}
