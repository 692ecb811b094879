package watch

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// ErrUnsupportedKind is wrapped by the DocumentError of a document whose kind is
// not one of the three that make up Services (v1 Service, discovery.k8s.io/v1
// EndpointSlice, v1 Endpoints), nor a v1 Node (this node's labels and state),
// nor a v1 Namespace or v1 Pod (what clusterdns reads beside Services, as
// CoreDNS does). Such a document is skipped; the others still load.
var ErrUnsupportedKind = errors.New("unsupported kind (want v1 Service, discovery.k8s.io/v1 EndpointSlice, v1 Endpoints, v1 Node, v1 Namespace or v1 Pod)")

// DocumentError is a document (or an item of a List) of a manifests file that
// did not load. Its text reads "services.yaml:12: v1 Service default/web: ...".
type DocumentError struct {
	File string
	// Line is 1-based: the line a YAML syntax error points at, otherwise the
	// first line of the document.
	Line int
	// Object names the object as far as it is known: "v1 Service default/web",
	// "items[2]: v1 Service default/web", or "" when nothing could be read.
	Object string
	Err    error
}

func (e *DocumentError) Error() string {
	if e.Object == "" {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: %s: %v", e.File, e.Line, e.Object, e.Err)
}

func (e *DocumentError) Unwrap() error { return e.Err }

// supported are the kinds a manifests file may hold, by apiVersion and kind.
var supported = map[schema.GroupVersionKind]bool{
	v1.SchemeGroupVersion.WithKind("Service"):                true,
	v1.SchemeGroupVersion.WithKind("Endpoints"):              true,
	discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"): true,
	v1.SchemeGroupVersion.WithKind("Node"):                   true,
	v1.SchemeGroupVersion.WithKind("Namespace"):              true,
	v1.SchemeGroupVersion.WithKind("Pod"):                    true,
}

// clusterScoped are the supported kinds that live in no namespace: they get
// none by default, and are named without one.
var clusterScoped = map[schema.GroupVersionKind]bool{
	v1.SchemeGroupVersion.WithKind("Node"):      true,
	v1.SchemeGroupVersion.WithKind("Namespace"): true,
}

// typedLists are the list kinds whose items may omit apiVersion and kind, as
// the API server writes them (`kubectl get --raw .../services`).
var typedLists = map[schema.GroupVersionKind]schema.GroupVersionKind{
	v1.SchemeGroupVersion.WithKind("ServiceList"):                v1.SchemeGroupVersion.WithKind("Service"),
	v1.SchemeGroupVersion.WithKind("EndpointsList"):              v1.SchemeGroupVersion.WithKind("Endpoints"),
	discoveryv1.SchemeGroupVersion.WithKind("EndpointSliceList"): discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"),
	v1.SchemeGroupVersion.WithKind("NodeList"):                   v1.SchemeGroupVersion.WithKind("Node"),
	v1.SchemeGroupVersion.WithKind("NamespaceList"):              v1.SchemeGroupVersion.WithKind("Namespace"),
	v1.SchemeGroupVersion.WithKind("PodList"):                    v1.SchemeGroupVersion.WithKind("Pod"),
}

// The manifests are read with encoding/json/v2 (its mirror for Go 1.26,
// github.com/go-json-experiment/json): one pass over each object, where
// encoding/json validates the whole text before it decodes it, and a third of
// the allocations. A 20,000-Service List loads in less than half the time
// (BenchmarkLoadFile). v2's defaults are strict already: names match case
// sensitively and a duplicate name is an error, as `kubectl apply
// --validate=strict` has them.
var (
	// strict decodes an object once its kind is known, and reports unknown
	// fields too: a misspelt "clusterIp" should fail loudly, not vanish.
	// Invalid UTF-8 becomes U+FFFD, as the API server's decoder has it.
	strict = json.JoinOptions(json.RejectUnknownMembers(true), jsontext.AllowInvalidUTF8(true))
	// lenient reads the header: the last of two "kind"s wins here, so the
	// error that strict then gives names the object as far as it can.
	lenient = json.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
)

// decodeStrict decodes JSON into obj (a new object of a kind the loader has
// read already), with errors that name the field.
func decodeStrict(js []byte, obj runtime.Object) error {
	if err := json.Unmarshal(js, obj, strict); err != nil {
		return fieldError(err)
	}
	return nil
}

// LoadManifests parses a manifests file: YAML documents separated by "---", or
// JSON, each a v1 Service, discovery.k8s.io/v1 EndpointSlice, v1 Endpoints or
// v1 Node, or a List of them. name is used only in errors. Objects without a
// namespace get "default", as kubectl gives them; a Node has none.
//
// The error joins one *DocumentError per document that did not load. Documents
// of other kinds wrap ErrUnsupportedKind and leave the rest loaded; any other
// error means the file as a whole should not be trusted (a caller keeps its
// last good state). The objects returned are those that loaded, in file order.
func LoadManifests(name string, data []byte) ([]runtime.Object, error) {
	l := loader{file: name, seen: make(map[objectKey]int)}
	for _, doc := range splitDocuments(data) {
		l.document(doc)
	}
	return l.objs, errors.Join(l.errs...)
}

// onlyUnsupported reports whether err (from LoadManifests) holds nothing but
// ErrUnsupportedKind errors, so that the objects that loaded can be used.
func onlyUnsupported(err error) bool {
	if err == nil {
		return true
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return errors.Is(err, ErrUnsupportedKind)
	}
	for _, e := range j.Unwrap() {
		if !errors.Is(e, ErrUnsupportedKind) {
			return false
		}
	}
	return true
}

// objectKey identifies an object across the file, to catch duplicates.
type objectKey struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

type loader struct {
	file string
	objs []runtime.Object
	errs []error
	seen map[objectKey]int // first line of each object
}

func (l *loader) fail(line int, object string, err error) {
	l.errs = append(l.errs, &DocumentError{File: l.file, Line: line, Object: object, Err: err})
}

// header is what every object says about itself before it is decoded.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Items []jsontext.Value `json:"items"`
}

func (h *header) gvk() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(h.APIVersion, h.Kind)
}

func (h *header) describe() string {
	s := strings.TrimSpace(h.APIVersion + " " + h.Kind)
	switch {
	case h.Metadata.Name == "":
	case clusterScoped[h.gvk()]:
		s = strings.TrimSpace(s + " " + h.Metadata.Name)
	default:
		ns := h.Metadata.Namespace
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		s = strings.TrimSpace(s + " " + ns + "/" + h.Metadata.Name)
	}
	return s
}

// document loads one YAML document: an object, a List, or nothing.
func (l *loader) document(doc document) {
	var h header
	js, isJSON := asJSON(doc.data)
	if !isJSON || json.Unmarshal(js, &h, lenient) != nil {
		// YAML, or not JSON after all: "{a: 1}" is YAML's flow style. The
		// YAML path also names the line of a syntax error.
		h = header{}
		var err error
		if js, err = l.toJSON(doc); err != nil {
			return
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			return // only comments, or an empty document
		}
		if err := json.Unmarshal(js, &h, lenient); err != nil {
			l.fail(doc.contentLine(), "", fmt.Errorf("not a Kubernetes object: %w", err))
			return
		}
	}
	line := doc.contentLine()
	gvk := h.gvk()
	if elem, typed := typedLists[gvk]; typed || gvk == v1.SchemeGroupVersion.WithKind("List") {
		l.list(line, h.Items, elem)
		return
	}
	obj, desc, err := decodeObject("", js, schema.GroupVersionKind{})
	l.add(line, desc, obj, err)
}

// list loads the items of a List. They are decoded in parallel, one share of
// the items per CPU: a List of 20,000 Services and their slices is most of a
// second of decoding per CPU, and clusterdns answers nothing in the zone
// until it is loaded. Results are taken in item order, so errors and
// duplicates read as if decoded one by one.
func (l *loader) list(line int, items []jsontext.Value, elem schema.GroupVersionKind) {
	type decoded struct {
		obj  runtime.Object
		desc string
		err  error
	}
	if len(l.seen) == 0 {
		l.seen = make(map[objectKey]int, len(items)) // not grown 15 times
	}
	out := make([]decoded, len(items))
	inShares(len(items), func(i int) {
		d := &out[i]
		d.obj, d.desc, d.err = decodeObject(fmt.Sprintf("items[%d]", i), items[i], elem)
	})
	for _, d := range out {
		l.add(line, d.desc, d.obj, d.err)
	}
}

// inShares calls f for each of n items, in parallel, one share of the items
// per CPU (item w, w+workers, ...), and returns when every call has: a List
// shorter than minItemsPerWorker items is done by one goroutine.
func inShares(n int, f func(i int)) {
	workers := min(goruntime.GOMAXPROCS(0), n/minItemsPerWorker+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				f(i)
			}
		})
	}
	wg.Wait()
}

// minItemsPerWorker: a List shorter than this is decoded by one goroutine.
const minItemsPerWorker = 100

// asJSON returns a document that may be JSON already (a `kubectl get -o json`
// List), to be taken as it is if it parses: the YAML parser would cost several
// times its size in memory and most of the load time. Parsing it is what
// tells: a check of the whole document beforehand (json.Valid) read its bytes
// once more, 5 to 8% of the load of a 20,000-Service List
// (BenchmarkLoadFile).
func asJSON(data []byte) ([]byte, bool) {
	t := bytes.TrimSpace(data)
	return t, len(t) > 0 && t[0] == '{'
}

// toJSON converts a YAML document to JSON. On an error it records it and
// returns it.
func (l *loader) toJSON(doc document) ([]byte, error) {
	js, err := yaml.YAMLToJSONStrict(doc.data)
	if err != nil {
		line, msg := yamlErrorLine(err, doc.line, doc.lastLine())
		l.fail(line, "", errors.New(msg))
		return nil, err
	}
	return js, nil
}

// decodeObject decodes one object; defaults fills in a missing apiVersion and
// kind (items of a typed list). desc names the object for errors, as far as it
// is known; where ("items[3]") leads it. It keeps no state: the items of a
// List are decoded in parallel.
func decodeObject(where string, js []byte, defaults schema.GroupVersionKind) (obj runtime.Object, desc string, err error) {
	var h header
	if err := json.Unmarshal(js, &h, lenient); err != nil {
		return nil, where, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if h.APIVersion == "" && h.Kind == "" {
		h.APIVersion, h.Kind = defaults.ToAPIVersionAndKind()
	}
	desc = h.describe()
	if where != "" {
		desc = where + ": " + desc
	}
	gvk := h.gvk()
	switch {
	case h.Kind == "" || h.APIVersion == "":
		return nil, desc, errors.New("apiVersion and kind are required")
	case !supported[gvk]:
		return nil, desc, ErrUnsupportedKind
	case h.Metadata.Name == "":
		return nil, desc, errors.New("metadata.name: required")
	}
	obj, err = scheme.New(gvk)
	if err != nil { // cannot happen for the supported kinds
		return nil, desc, err
	}
	if err := decodeStrict(js, obj); err != nil {
		return nil, desc, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk) // typed list items may lack it
	m, ok := obj.(metav1.Object)
	if !ok { // cannot happen for the supported kinds
		return nil, desc, fmt.Errorf("decoded into %T, not an object", obj)
	}
	if m.GetNamespace() == "" && !clusterScoped[gvk] {
		m.SetNamespace(metav1.NamespaceDefault)
	}
	return obj, desc, nil
}

// add records one decoded object, or the error that kept it out, and catches
// a second object of the same kind, namespace and name.
func (l *loader) add(line int, desc string, obj runtime.Object, err error) {
	if err != nil {
		l.fail(line, desc, err)
		return
	}
	m := obj.(metav1.Object) // decodeObject checked
	key := objectKey{gvk: obj.GetObjectKind().GroupVersionKind(), namespace: m.GetNamespace(), name: m.GetName()}
	if first, dup := l.seen[key]; dup {
		l.fail(line, desc, fmt.Errorf("duplicate of the object at line %d", first))
		return
	}
	l.seen[key] = line
	l.objs = append(l.objs, obj)
}

// fieldError rewrites a decode error so that the field leads, named as
// kubectl names it: `unknown field "spec.clusterIp"`, `duplicate field
// "kind"`, `spec.ports[0].port: cannot unmarshal JSON string into Go int32`.
func fieldError(err error) error {
	var se *json.SemanticError
	var sy *jsontext.SyntacticError
	switch {
	case errors.As(err, &se) && errors.Is(se.Err, json.ErrUnknownName):
		return fmt.Errorf("unknown field %q", fieldPath(se.JSONPointer))
	case errors.As(err, &se):
		msg := strings.TrimPrefix(se.Error(), "json: ")
		// go-json-experiment says "cannot" or "unable to", chosen at random
		// once per process (errorModalVerb: it keeps callers from matching
		// its text); svcproxy's messages are its own contract, so one word.
		msg = strings.Replace(msg, "unable to ", "cannot ", 1)
		msg = strings.Replace(msg, " within "+strconv.Quote(string(se.JSONPointer)), "", 1)
		return fmt.Errorf("%s: %s", fieldPath(se.JSONPointer), msg)
	case errors.As(err, &sy) && errors.Is(sy.Err, jsontext.ErrDuplicateName):
		return fmt.Errorf("duplicate field %q", fieldPath(sy.JSONPointer))
	}
	return err
}

// fieldPath turns a JSON Pointer into a field path: "/spec/ports/0/port" is
// "spec.ports[0].port". A name made of digits is taken for an index: no field
// of the kinds read has such a name (a label's key may, and reads as one).
func fieldPath(p jsontext.Pointer) string {
	var b strings.Builder
	for name := range p.Tokens() {
		if _, err := strconv.Atoi(name); err == nil {
			b.WriteString("[" + name + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(name)
	}
	return b.String()
}

// yamlLineRE finds the line numbers the YAML parser puts in its messages.
var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// yamlErrorLine turns a YAML error, whose line numbers count from the start of
// its document, into an absolute line and a message without the line prefix.
// The parser reports an error at the end of input on the line after the last
// one; such a line is clamped to lastLine, so it names a line the file has
// (found by FuzzLoadManifests: "0: \n0").
func yamlErrorLine(err error, docLine, lastLine int) (int, string) {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	line := docLine
	first := true
	msg = yamlLineRE.ReplaceAllStringFunc(msg, func(m string) string {
		n, convErr := strconv.Atoi(m[len("line "):])
		if convErr != nil {
			return m
		}
		abs := min(docLine+n-1, lastLine)
		if first {
			line, first = abs, false
		}
		return "line " + strconv.Itoa(abs)
	})
	// "yaml: line 12: did not find expected key" reads best as
	// "file:12: yaml: did not find expected key".
	msg = strings.Replace(msg, "line "+strconv.Itoa(line)+": ", "", 1)
	return line, msg
}

// document is one YAML document of a stream and the line it starts on.
type document struct {
	line int // 1-based line of data's first line
	data []byte
}

// lastLine is the document's last line (its trailing newline ends it; it
// starts no new one).
func (d document) lastLine() int {
	return d.line + bytes.Count(bytes.TrimSuffix(d.data, []byte("\n")), []byte("\n"))
}

// contentLine is the first line of the document that is neither blank nor a
// comment: where a reader looks for the object.
func (d document) contentLine() int {
	for i, line := range bytes.Split(d.data, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			return d.line + i
		}
	}
	return d.line
}

// splitDocuments splits a YAML stream at its "---" (and "...") marker lines,
// remembering where each document starts so that errors can name the file's
// line, not the document's. Like kubectl's YAMLReader it looks only at lines
// that start with the marker; a marker followed by content ("--- a: 1") keeps
// that content, blanked marker and all, on its line.
func splitDocuments(data []byte) []document {
	var docs []document
	cur := document{line: 1}
	lineNo := 0
	for len(data) > 0 {
		lineNo++
		end := bytes.IndexByte(data, '\n')
		var line []byte
		if end < 0 {
			line, data = data, nil
		} else {
			line, data = data[:end+1], data[end+1:]
		}
		rest, isMarker := markerLine(line)
		if !isMarker {
			cur.data = append(cur.data, line...)
			continue
		}
		docs = append(docs, cur)
		cur = document{line: lineNo + 1}
		if len(bytes.TrimSpace(rest)) > 0 && rest[0] != '#' {
			// Content after "--- " belongs to the next document, on this line.
			cur.line = lineNo
			cur.data = append(bytes.Repeat([]byte(" "), len(line)-len(rest)), rest...)
		}
	}
	return append(docs, cur)
}

// markerLine reports whether line starts or ends a document, and what follows
// the marker. "---" must be followed by white space or the end of the line.
func markerLine(line []byte) (rest []byte, ok bool) {
	for _, marker := range []string{"---", "..."} {
		if !bytes.HasPrefix(line, []byte(marker)) {
			continue
		}
		rest = line[len(marker):]
		if len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\n' || rest[0] == '\r' {
			return bytes.TrimLeft(rest, " \t"), true
		}
	}
	return nil, false
}
