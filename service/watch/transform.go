package watch

import (
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/svcproxy/svcproxy/service"
)

// annotationPrefix marks the only annotations svcproxy reads (for example
// svcproxy.io/ipvs-scheduler); the others are dropped before conversion.
const annotationPrefix = "svcproxy.io/"

// The informers keep converted objects, not API objects. Their transform
// (client-go SetTransform) runs once per object as it arrives: it validates
// and converts a Service or an EndpointSlice into the form a Snapshot is
// made of (service.ConvertService, service.ConvertSlice) and the informer
// caches that instead of the v1 object, which it drops. A Snapshot is then
// service.Join of the cached forms: nothing is converted again for a
// Snapshot, and the caches hold about a third of what trimmed v1 objects
// took (measured in docs/benchmarks.md). CoreDNS's kubernetes plugin does the
// same with its own object.Service and object.Endpoints.

// cachedService is what a Service informer keeps of a Service.
type cachedService struct {
	cacheMeta
	obj *service.ServiceObject
}

// cachedSlice is what an EndpointSlice informer keeps of a slice.
type cachedSlice struct {
	cacheMeta
	obj *service.SliceObject
}

// cachedNode is what the Node informer keeps of this node's Node: the
// little a Snapshot carries of it (service.ConvertNode), not its status,
// images and conditions.
type cachedNode struct {
	cacheMeta
	obj *service.Node
}

// cachedNamespace is what the Namespace informer keeps of a Namespace: its
// name (in cacheMeta).
type cachedNamespace struct{ cacheMeta }

// cachedPod is what the Pod informer keeps of a Pod: the address CoreDNS
// knows it by (service.PodIP), if it has one.
type cachedPod struct {
	cacheMeta
	ip  netip.Addr
	has bool
}

// compact is the informers' transform: a *v1.Service becomes a
// *cachedService, an *discoveryv1.EndpointSlice a *cachedSlice, a *v1.Node a
// *cachedNode. Anything else, a tombstone or an object already converted, is
// returned as it is.
// It reads obj, which it may modify (the informer owns it), and keeps none
// of it but strings.
func compact(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1.Service:
		return compactService(o), nil
	case *discoveryv1.EndpointSlice:
		return compactSlice(o), nil
	case *v1.Node:
		return &cachedNode{cacheMeta: metaOf(&o.ObjectMeta), obj: service.ConvertNode(o)}, nil
	case *v1.Namespace:
		return &cachedNamespace{cacheMeta: metaOf(&o.ObjectMeta)}, nil
	case *v1.Pod:
		ip, has := service.PodIP(o)
		return &cachedPod{cacheMeta: metaOf(&o.ObjectMeta), ip: ip, has: has}, nil
	}
	return obj, nil
}

// compactService converts svc, which it may modify.
func compactService(svc *v1.Service) *cachedService {
	svc.Annotations = ours(svc.Annotations)
	return &cachedService{cacheMeta: metaOf(&svc.ObjectMeta), obj: service.ConvertService(svc)}
}

// compactSlice converts es.
func compactSlice(es *discoveryv1.EndpointSlice) *cachedSlice {
	return &cachedSlice{cacheMeta: metaOf(&es.ObjectMeta), obj: service.ConvertSlice(es)}
}

// The cached forms are runtime.Objects, as the items of a list must be for
// the reflector (decodedList in list.go). They have no kind of their own
// and are never modified, so a copy shares the converted object.

func (*cachedService) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (*cachedSlice) GetObjectKind() schema.ObjectKind   { return schema.EmptyObjectKind }
func (*cachedNode) GetObjectKind() schema.ObjectKind    { return schema.EmptyObjectKind }
func (*cachedNamespace) GetObjectKind() schema.ObjectKind {
	return schema.EmptyObjectKind
}
func (*cachedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (c *cachedService) DeepCopyObject() runtime.Object { d := *c; return &d }
func (c *cachedSlice) DeepCopyObject() runtime.Object   { d := *c; return &d }
func (c *cachedNode) DeepCopyObject() runtime.Object    { d := *c; return &d }
func (c *cachedNamespace) DeepCopyObject() runtime.Object {
	d := *c
	return &d
}
func (c *cachedPod) DeepCopyObject() runtime.Object { d := *c; return &d }

// namespacesOf is the set of the names a Namespace informer's cache holds.
func namespacesOf(store cache.Store) service.Namespaces {
	keys := store.ListKeys()
	ns := make(service.Namespaces, len(keys))
	for _, k := range keys {
		ns[k] = struct{}{} // a cluster-scoped object's key is its name
	}
	return ns
}

// podIPsOf indexes the addresses a Pod informer's cache holds.
func podIPsOf(store cache.Store) service.PodIPs {
	items := store.List()
	pods := make(service.PodIPs, len(items))
	for _, it := range items {
		if p, ok := it.(*cachedPod); ok && p.has {
			pods[p.ip] = append(pods[p.ip], p.namespace)
		}
	}
	return pods
}

// ours returns the annotations svcproxy reads (nil if none): a Service keeps
// its annotations, and kubectl apply's last-applied-configuration alone is
// the size of the whole object.
func ours(annotations map[string]string) map[string]string {
	var keep map[string]string
	for k, v := range annotations {
		if strings.HasPrefix(k, annotationPrefix) {
			if keep == nil {
				keep = make(map[string]string)
			}
			keep[k] = v
		}
	}
	return keep
}

// cacheMeta is what client-go's informer reads of a cached object: its
// namespace and name (the cache key, cache.MetaNamespaceKeyFunc) and its
// resource version (an update that keeps it is a resync,
// sharedIndexInformer.OnUpdate). It implements metav1.Object, which
// meta.Accessor asks for; the other fields it does not have read as empty and
// are not written, as that interface allows ("a no-op and return a default
// value") and as CoreDNS's object.Empty does.
type cacheMeta struct {
	namespace, name, resourceVersion string
}

func metaOf(m *metav1.ObjectMeta) cacheMeta {
	return cacheMeta{namespace: m.Namespace, name: m.Name, resourceVersion: m.ResourceVersion}
}

var _ metav1.Object = (*cacheMeta)(nil)

func (m *cacheMeta) GetNamespace() string       { return m.namespace }
func (m *cacheMeta) GetName() string            { return m.name }
func (m *cacheMeta) GetResourceVersion() string { return m.resourceVersion }

// The rest of metav1.Object: nothing else is kept.

func (m *cacheMeta) SetNamespace(string)                           {}
func (m *cacheMeta) SetName(string)                                {}
func (m *cacheMeta) GetGenerateName() string                       { return "" }
func (m *cacheMeta) SetGenerateName(string)                        {}
func (m *cacheMeta) GetUID() types.UID                             { return "" }
func (m *cacheMeta) SetUID(types.UID)                              {}
func (m *cacheMeta) SetResourceVersion(string)                     {}
func (m *cacheMeta) GetGeneration() int64                          { return 0 }
func (m *cacheMeta) SetGeneration(int64)                           {}
func (m *cacheMeta) GetSelfLink() string                           { return "" }
func (m *cacheMeta) SetSelfLink(string)                            {}
func (m *cacheMeta) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (m *cacheMeta) SetCreationTimestamp(metav1.Time)              {}
func (m *cacheMeta) GetDeletionTimestamp() *metav1.Time            { return nil }
func (m *cacheMeta) SetDeletionTimestamp(*metav1.Time)             {}
func (m *cacheMeta) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (m *cacheMeta) SetDeletionGracePeriodSeconds(*int64)          {}
func (m *cacheMeta) GetLabels() map[string]string                  { return nil }
func (m *cacheMeta) SetLabels(map[string]string)                   {}
func (m *cacheMeta) GetAnnotations() map[string]string             { return nil }
func (m *cacheMeta) SetAnnotations(map[string]string)              {}
func (m *cacheMeta) GetFinalizers() []string                       { return nil }
func (m *cacheMeta) SetFinalizers([]string)                        {}
func (m *cacheMeta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (m *cacheMeta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (m *cacheMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (m *cacheMeta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}
