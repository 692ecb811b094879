//go:build tools

// Package deps pins the modules svcproxy uses while its packages are being
// written, so go.sum is complete for every helper. Removed once all are in use.
package deps

import (
	_ "github.com/coreos/go-iptables/iptables"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/miekg/dns"
	_ "github.com/moby/ipvs"
	_ "github.com/stretchr/testify/require"
	_ "github.com/vishvananda/netlink"
	_ "go.uber.org/goleak"
	_ "golang.org/x/sync/errgroup"
	_ "golang.org/x/sys/unix"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/api/discovery/v1"
	_ "k8s.io/apimachinery/pkg/util/yaml"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/rest"
	_ "k8s.io/client-go/tools/cache"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "sigs.k8s.io/yaml"
)
