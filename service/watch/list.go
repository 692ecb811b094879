package watch

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/tools/cache"
)

// The informers' first LIST is most of the start-up at 20,000 Services
// (docs/benchmarks.md). client-go's path decodes the answer into one
// ServiceList whose Items grow by append, every growth copying the Services
// decoded so far; the reflector then copies each item out of the list again
// (meta.ExtractListWithAlloc), and only then does the informer's transform
// convert it (transform.go). All 20,000 API objects are alive at once, twice
// over for a while.
//
// listConverted instead walks the items of the protobuf answer and decodes
// each into an object of its own, converting it at once, one share of the
// items per CPU: the list the reflector gets holds converted objects only
// (decodedList), which the transform passes through. Each object is decoded
// by its own generated Unmarshal, as client-go would; only the walk over the
// list is done here, with the protobuf wire format's package (protowire). An
// answer in another encoding (JSON, from a server or proxy that does not
// speak protobuf) is decoded the usual way and converted by the transform.

// listKind is what listConverted needs to know of one kind.
type listKind struct {
	resource         string // "services"
	apiVersion, kind string // of the list: "v1", "ServiceList"
	// decode decodes one item's protobuf and converts it.
	decode func([]byte) (runtime.Object, error)
}

var (
	serviceList = listKind{resource: "services", apiVersion: "v1", kind: "ServiceList",
		decode: func(b []byte) (runtime.Object, error) {
			svc := new(v1.Service)
			if err := svc.Unmarshal(b); err != nil {
				return nil, err
			}
			return compactService(svc), nil
		}}
	sliceList = listKind{resource: "endpointslices", apiVersion: "discovery.k8s.io/v1", kind: "EndpointSliceList",
		decode: func(b []byte) (runtime.Object, error) {
			es := new(discoveryv1.EndpointSlice)
			if err := es.Unmarshal(b); err != nil {
				return nil, err
			}
			return compactSlice(es), nil
		}}
)

// listWatch lists and watches k in every namespace, with the list options
// that tweak sets (the selectors of select.go): the watch is client-go's,
// the list is listConverted.
func listWatch(c cache.Getter, k listKind, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	lw := cache.NewFilteredListWatchFromClient(c, k.resource, metav1.NamespaceAll, tweak)
	lw.ListWithContextFunc = func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		tweak(&opts)
		return listConverted(ctx, c, k, opts)
	}
	lw.ListFunc = func(opts metav1.ListOptions) (runtime.Object, error) {
		tweak(&opts)
		return listConverted(context.Background(), c, k, opts)
	}
	return listThenWatch{lw}
}

// listConverted sends the LIST that client-go's ListWatch would send, reads
// the answer with readAnswer and decodes a protobuf answer with decodeList;
// any other answer (JSON) is decoded by the scheme's serializers, as the
// client would.
func listConverted(ctx context.Context, c cache.Getter, k listKind, opts metav1.ListOptions) (runtime.Object, error) {
	body, err := c.Get().Resource(k.resource).VersionedParams(&opts, metav1.ParameterCodec).Stream(ctx)
	if err != nil {
		return nil, err // an API error (apierrors.IsGone and the like work on it)
	}
	defer body.Close()
	data, err := readAnswer(body)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", k.resource, err)
	}
	if list, ok, err := decodeList(data, k); ok {
		return list, err
	}
	return runtime.Decode(answerDecoder, data)
}

// answerDecoder decodes an answer that decodeList leaves: it tells JSON from
// protobuf by the content, as client-go's decoder tells them by the
// Content-Type.
var answerDecoder = serializer.NewCodecFactory(scheme).UniversalDeserializer()

// readAnswer reads an answer whole. io.ReadAll, which client-go's Do uses,
// starts with 512 bytes and doubles the buffer as it fills: at 20,000
// Services, for a 9.5 MB answer, about twice its size is allocated, copied
// and, being fresh memory, zeroed and faulted in (docs/benchmarks.md). A
// protobuf answer says its size in its first bytes (answerSize): the buffer
// is made that size at once. Any other answer is read as io.ReadAll would.
func readAnswer(r io.Reader) ([]byte, error) {
	head := make([]byte, 256)
	n, err := io.ReadFull(r, head)
	switch err {
	case nil:
	case io.EOF, io.ErrUnexpectedEOF:
		return head[:n], nil // all of it
	default:
		return nil, err
	}
	// bytes.Buffer.ReadFrom grows the buffer when less than bytes.MinRead
	// is free before a read, the last one (the one that sees EOF) too.
	buf := bytes.NewBuffer(make([]byte, 0, max(answerSize(head), n)+bytes.MinRead))
	buf.Write(head)
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// maxAnswerHint bounds the size readAnswer trusts an answer to announce
// before it arrives: a larger answer is still read, its buffer grown as it
// comes.
const maxAnswerHint = 1 << 30

// answerSize is the size a protobuf answer announces in head, its first
// bytes: the magic, the envelope's typeMeta and the length of its raw field
// (the list), which the envelope's other fields follow, a few bytes long. It
// is 0 when head is not the start of such an answer.
func answerSize(head []byte) int {
	m, found := bytes.CutPrefix(head, protobufMagic)
	if !found {
		return 0
	}
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 || typ != protowire.BytesType {
			return 0
		}
		m = m[n:]
		size, n := protowire.ConsumeVarint(m)
		if n < 0 || size > maxAnswerHint {
			return 0
		}
		m = m[n:]
		if num == 2 { // raw: what follows is the list
			return len(head) - len(m) + int(size) + envelopeTail
		}
		if uint64(len(m)) < size {
			return 0
		}
		m = m[size:]
	}
	return 0
}

// envelopeTail is room for the fields of runtime.Unknown after raw:
// contentEncoding and contentType, which the API server sends empty (a tag
// and a zero length each).
const envelopeTail = 16

// decodedList is a list of converted objects (*cachedService,
// *cachedSlice): what the reflector takes the items and the resource
// version from.
type decodedList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

// DeepCopyObject copies the list; its items are never modified, so the copy
// shares them.
func (l *decodedList) DeepCopyObject() runtime.Object {
	c := *l
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	c.Items = append([]runtime.Object(nil), l.Items...)
	return &c
}

// protobufMagic starts every protobuf answer of the API server: "k8s" and an
// encoding byte, 0, then a runtime.Unknown whose raw field holds the object
// (k8s.io/apimachinery/pkg/runtime/serializer/protobuf).
var protobufMagic = []byte{'k', '8', 's', 0}

// decodeList decodes data, a protobuf list of kind k, into a decodedList.
// ok is false, and nothing decoded, when data is not such a list (not
// protobuf, another kind, an envelope it does not know): the caller decodes
// it the usual way, which also reports what is wrong with it.
func decodeList(data []byte, k listKind) (list *decodedList, ok bool, err error) {
	data, found := bytes.CutPrefix(data, protobufMagic)
	if !found {
		return nil, false, nil
	}
	// runtime.Unknown: 1 typeMeta, 2 raw, 3 contentEncoding, 4 contentType.
	var tm runtime.TypeMeta
	var raw []byte
	var encoding string
	err = fields(data, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			return tm.Unmarshal(v)
		case 2:
			raw = v
		case 3:
			encoding = string(v)
		}
		return nil
	})
	if err != nil || tm.APIVersion != k.apiVersion || tm.Kind != k.kind || encoding != "" {
		return nil, false, nil
	}

	// The list: 1 metadata, 2 items.
	list = &decodedList{TypeMeta: metav1.TypeMeta{APIVersion: tm.APIVersion, Kind: tm.Kind}}
	var items [][]byte
	err = fields(raw, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			return list.ListMeta.Unmarshal(v)
		case 2:
			items = append(items, v)
		}
		return nil
	})
	if err != nil {
		return nil, true, fmt.Errorf("decode %s: %w", k.kind, err)
	}
	if list.Items, err = decodeItems(items, k); err != nil {
		return nil, true, err
	}
	return list, true, nil
}

// decodeItems decodes and converts items, one share per CPU (inShares, as
// the manifests file's List items are). The first error, in item order, is
// returned.
func decodeItems(items [][]byte, k listKind) ([]runtime.Object, error) {
	out := make([]runtime.Object, len(items))
	errs := make([]error, len(items))
	inShares(len(items), func(i int) { out[i], errs[i] = k.decode(items[i]) })
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("decode %s items[%d]: %w", k.kind, i, err)
		}
	}
	return out, nil
}

// fields calls f with the number and value of each length-delimited field of
// the protobuf message m (embedded messages, strings and bytes: the only kind
// of field the envelope and the lists have), in order, and skips fields of
// other wire types.
func fields(m []byte, f func(protowire.Number, []byte) error) error {
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m = m[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, m); n < 0 {
				return protowire.ParseError(n)
			}
			m = m[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(m)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m = m[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}
