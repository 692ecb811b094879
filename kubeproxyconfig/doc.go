// Package kubeproxyconfig reads kube-proxy's configuration file, the
// KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) that kubeadm and
// kind write into the kube-proxy ConfigMap, and says what svcproxy does with
// each of its fields.
//
// The file is decoded with the upstream Go types and scheme (package
// k8s.io/kube-proxy/config/v1alpha1), strictly: an unknown, repeated or
// ill-typed field is an error naming the file and the field. It is then
// defaulted as kube-proxy v1.37.2 defaults it (Default follows
// SetDefaults_KubeProxyConfiguration of k8s.io/kubernetes'
// pkg/proxy/apis/config/v1alpha1, written again here so that svcproxy does not
// depend on k8s.io/kubernetes; what the real kube-proxy writes with
// --write-config-to, in testdata/kube-proxy, checks it).
//
//	cfg, err := kubeproxyconfig.Load("/var/lib/kube-proxy/config.conf")
//	opts, err := kubeproxyconfig.Map(cfg)  // svcproxy's options
//	for _, n := range opts.Ignored {       // one log line each
//		log.Info("ignored", "field", n.Field, "reason", n.Reason)
//	}
//
// Flags is kube-proxy's command line (--config, --hostname-override, --v and
// the rest of what kube-proxy 1.37 accepts), with kube-proxy's rule for flags
// given beside --config: the file wins, except for --hostname-override and
// the logging flags (Options.Complete, cmd/kube-proxy/app/options.go).
package kubeproxyconfig
