package watch

import (
	"fmt"
	"net/http"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apifields "k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The API client is not client-go's clientset. The clientset (and
// kubernetes/scheme, which it imports) registers every type of every API
// group at init, some sixty groups, for two read here: measured on an idle
// clusterdns, that was 10 of its 28 MiB resident (mostly the binary's pages
// that the registrations touch). Instead, one REST client per group lists and
// watches the kinds read (Services, EndpointSlices, this node's Node), with a
// scheme that knows only the kinds read here and in manifests files.

// scheme knows the kinds this package reads: core/v1 (Services, Endpoints,
// Nodes) and discovery/v1 (EndpointSlices), and the meta types of lists and watches.
// It decodes the API server's answers and the manifests files.
var scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	// As client-go's kubernetes/scheme does: the unversioned meta types
	// (Status, WatchEvent, ListOptions) under "v1", then each group.
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{v1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // the generated registrations cannot fail
		}
	}
	return s
}

// protobuf is the content type of lists and watches: decoding it takes a
// fraction of the CPU and garbage of JSON, which matters when 20,000 Services
// arrive at once. kube-proxy asks for it too (--kube-api-content-type).
const protobuf = "application/vnd.kubernetes.protobuf"

// listWatchers are where the informers list and watch each kind.
type listWatchers struct {
	services, slices cache.ListerWatcher
	// node lists and watches this node's Node object, and no other: nil when
	// the Watcher follows no Node (Config.NodeName is "").
	node cache.ListerWatcher
	// namespaces and pods list and watch every Namespace and every Pod
	// that has not finished: nil unless Config.Namespaces, Config.Pods.
	namespaces, pods cache.ListerWatcher
}

// apiListWatchers connects to the API server of rc: a REST client for core/v1
// and one for discovery/v1, sharing one HTTP client (one connection).
// Authentication is rc's: whatever the kubeconfig or the in-cluster config
// says (client certificates, a bearer token or token file, exec plugins).
// sel says what to ask for (select.go): its nodeName, when not "", adds the
// watch of that Node.
func apiListWatchers(rc *rest.Config, sel selection) (listWatchers, error) {
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return listWatchers{}, fmt.Errorf("api client: %w", err)
	}
	core, err := restClient(rc, hc, "/api", v1.SchemeGroupVersion)
	if err != nil {
		return listWatchers{}, err
	}
	discovery, err := restClient(rc, hc, "/apis", discoveryv1.SchemeGroupVersion)
	if err != nil {
		return listWatchers{}, err
	}
	lws := listWatchers{
		services: listWatch(core, serviceList, sel.serviceOptions),
		slices:   listWatch(discovery, sliceList, sel.sliceOptions),
	}
	if sel.nodeName != "" {
		lws.node = nodeListWatch(core, sel.nodeName)
	}
	if sel.namespaces {
		// Every Namespace: the options are the reflector's (the modifier may
		// not be nil: client-go calls it).
		lws.namespaces = listThenWatch{cache.NewFilteredListWatchFromClient(core, "namespaces", metav1.NamespaceAll, func(*metav1.ListOptions) {})}
	}
	if sel.pods {
		// CoreDNS's podListFunc: the pods that may still have an address.
		lws.pods = listThenWatch{cache.NewFilteredListWatchFromClient(core, "pods", metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.FieldSelector = podsNotFinished
		})}
	}
	return lws, nil
}

// nodeListWatch lists and watches the Node named name and no other, selected
// by the API server (metadata.name=name), as kube-proxy's node informer does
// (k8s.io/kubernetes v1.37.2 pkg/proxy/node.go, newNodeManager): a node
// proxy has no business with the other Nodes, and a cluster of 5,000 nodes
// would otherwise send each of them every Node's status updates. Its LIST
// is one object: client-go's path decodes it.
// podsNotFinished is CoreDNS's pod field selector (plugin/kubernetes,
// podListFunc).
const podsNotFinished = "status.phase!=Succeeded,status.phase!=Failed,status.phase!=Unknown"

func nodeListWatch(c cache.Getter, name string) cache.ListerWatcher {
	return listThenWatch{cache.NewFilteredListWatchFromClient(c, "nodes", metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = apifields.OneTermEqualSelector("metadata.name", name).String()
	})}
}

// restClient is a client of one API group version that asks for protobuf
// (JSON still decodes: a server or proxy that does not speak protobuf answers
// in JSON).
func restClient(rc *rest.Config, hc *http.Client, apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(rc)
	c.APIPath = apiPath
	c.GroupVersion = &gv
	c.ContentType = protobuf
	c.AcceptContentTypes = protobuf + ",application/json"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	rcl, err := rest.RESTClientForConfigAndClient(c, hc)
	if err != nil {
		return nil, fmt.Errorf("api client %s: %w", gv, err)
	}
	return rcl, nil
}

// listThenWatch makes an informer use a plain LIST then WATCH, as kube-proxy
// did for years, instead of client-go's streaming watch-list (WatchListClient,
// on by default since client-go 1.35). The reason is shutdown: while the API
// server is unreachable, the watch-list path sleeps out its backoff (up to a
// minute) without looking at the stop signal (client-go
// tools/cache/reflector.go, watchList), and Run could not return until it
// woke. The LIST+WATCH path waits on the stop signal.
type listThenWatch struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported is the method client-go looks for
// (client-go util/watchlist.DoesClientNotSupportWatchListSemantics).
func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }
