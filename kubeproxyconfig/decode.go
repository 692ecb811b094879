package kubeproxyconfig

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/kube-proxy/config/v1alpha1"
)

// MaxFileBytes bounds the file Load reads: kubeadm's is about 2 KB, and a
// ConfigMap holds at most 1 MiB.
const MaxFileBytes = 1 << 20

// scheme knows the one type, v1alpha1.KubeProxyConfiguration, and defaults
// it with Default, as kube-proxy's scheme (pkg/proxy/apis/config/scheme)
// registers the generated defaulter. svcproxy has no internal version to
// convert to: it reads the v1alpha1 object itself.
var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme, serializer.EnableStrict)
)

func init() {
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	scheme.AddTypeDefaultingFunc(&v1alpha1.KubeProxyConfiguration{}, func(obj any) {
		Default(obj.(*v1alpha1.KubeProxyConfiguration))
	})
}

// Load reads file and decodes it with Decode.
func Load(file string) (*v1alpha1.KubeProxyConfiguration, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a KubeProxyConfiguration", file, MaxFileBytes)
	}
	return Decode(data, file)
}

// Decode decodes data, YAML or JSON, as a KubeProxyConfiguration of
// kubeproxy.config.k8s.io/v1alpha1 and defaults it (Default). It is strict: an
// unknown field, a field given twice, a field of the wrong type or another
// kind or version is an error that names file and the field. kube-proxy 1.37
// tries the same strict decoding first, but then retries leniently and only
// logs the strict error (Options.loadConfig): svcproxy refuses the file, so
// a typo never silently leaves a setting at its default.
func Decode(data []byte, file string) (*v1alpha1.KubeProxyConfiguration, error) {
	obj, gvk, err := codecs.UniversalDecoder(v1alpha1.SchemeGroupVersion).Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", file, decodeError(err, data))
	}
	cfg, ok := obj.(*v1alpha1.KubeProxyConfiguration)
	if !ok {
		return nil, fmt.Errorf("%s: %s: want KubeProxyConfiguration of %s", file, gvk, v1alpha1.SchemeGroupVersion)
	}
	return cfg, nil
}

// decodeError words apimachinery's errors as svcproxy's, each naming the
// field: the strict ones keep their paths (unknown field "ipvs.shceduler"),
// and a value that does not parse is found again by locate, since some
// (a duration, a quantity) come back from their own UnmarshalJSON without it.
func decodeError(err error, data []byte) string {
	if s, ok := runtime.AsStrictDecodingError(err); ok {
		var msgs []string
		for _, e := range s.Errors() {
			msgs = append(msgs, e.Error())
		}
		return strings.Join(msgs, "; ")
	}
	want := "want apiVersion " + v1alpha1.SchemeGroupVersion.String() + ", kind KubeProxyConfiguration"
	switch {
	case runtime.IsMissingVersion(err):
		return "apiVersion missing: " + want
	case runtime.IsMissingKind(err):
		return "kind missing: " + want
	case runtime.IsNotRegisteredError(err):
		var tm metav1.TypeMeta
		_ = yaml.Unmarshal(data, &tm)
		return fmt.Sprintf("apiVersion %q, kind %q: %s", tm.APIVersion, tm.Kind, want)
	}
	if path, msg := locate(data); path != "" {
		return path + ": " + msg
	}
	return err.Error()
}

// locate finds the first field of data whose value does not decode into its
// Go type, walking the document beside v1alpha1.KubeProxyConfiguration by the
// fields' JSON names, and returns its path (conntrack.tcpCloseWaitTimeout)
// and why. It returns "" when every leaf decodes on its own.
func locate(data []byte) (path, msg string) {
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return "", ""
	}
	return locateIn(doc, reflect.TypeFor[v1alpha1.KubeProxyConfiguration](), "")
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func locateIn(obj map[string]any, t reflect.Type, prefix string) (string, string) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f, ok := jsonField(t, k)
		if !ok {
			continue // the strict decoder reports unknown fields
		}
		path := prefix + k
		sub, isObj := obj[k].(map[string]any)
		ft := f.Type
		if isObj && ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(unmarshalerType) {
			if p, m := locateIn(sub, ft, path+"."); p != "" {
				return p, m
			}
			continue
		}
		raw, _ := json.Marshal(obj[k])
		if err := json.Unmarshal(raw, reflect.New(ft).Interface()); err != nil {
			return path, strings.TrimPrefix(err.Error(), "json: ")
		}
	}
	return "", ""
}

// jsonField is t's field named name in JSON, looking into inlined structs
// (`json:""`, as TypeMeta and the logging options are).
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" && f.Anonymous && f.Type.Kind() == reflect.Struct {
			if g, ok := jsonField(f.Type, name); ok {
				return g, true
			}
			continue
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// Encode is cfg as YAML, with its apiVersion and kind, as kube-proxy's
// --write-config-to writes it (the scheme's YAML serializer).
func Encode(cfg *v1alpha1.KubeProxyConfiguration) ([]byte, error) {
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeYAML)
	if !ok {
		return nil, fmt.Errorf("no %s serializer", runtime.ContentTypeYAML)
	}
	return runtime.Encode(codecs.EncoderForVersion(info.Serializer, v1alpha1.SchemeGroupVersion), cfg)
}
