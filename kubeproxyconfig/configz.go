package kubeproxyconfig

import (
	"encoding/json"
	"net/http"

	"k8s.io/kube-proxy/config/v1alpha1"
)

// Configz serves cfg as kube-proxy's /configz does (component-base's
// configz, registered by newProxyServer, cmd/kube-proxy/app/server.go): a
// JSON object whose one key is the API group, kubeproxy.config.k8s.io, and
// whose value is the configuration in force, with its apiVersion and kind.
// It is a handler of its own rather than configz's, whose registry is one
// per process and refuses a second registration of the group.
func Configz(cfg *v1alpha1.KubeProxyConfiguration) http.Handler {
	c := cfg.DeepCopy()
	c.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("KubeProxyConfiguration"))
	body, err := json.Marshal(map[string]any{v1alpha1.GroupName: c})
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err != nil {
			http.Error(w, "error marshaling json: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(body)
	})
}
