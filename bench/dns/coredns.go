package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/svcproxy/svcproxy/internal/k8sbin"
)

// coreDNSVersion is the CoreDNS the benchmark compares against: the one
// kubeadm v1.37.2 deploys, pinned by test/kapi/coredns (go.mod), the same
// program as the kubeadm cluster's coredns image.
const coreDNSVersion = "v1.14.6"

// buildCoreDNS returns CoreDNS from test/kapi's cache, built into it first
// when missing (internal/k8sbin, from the Go module proxy; a cold build takes
// minutes): static, without symbol tables, as CoreDNS's Makefile builds its
// releases. root is the svcproxy repository.
func buildCoreDNS(ctx context.Context, root string) (string, error) {
	bins, err := k8sbin.Build(ctx, k8sbin.Config{RepoRoot: root, CoreDNS: true, Log: os.Stderr})
	if err != nil {
		return "", err
	}
	if !strings.Contains(bins.CoreDNS, "coredns-"+coreDNSVersion+"_") {
		return "", fmt.Errorf("CoreDNS %s: test/kapi/coredns pins another version (%s)", coreDNSVersion, bins.CoreDNS)
	}
	return bins.CoreDNS, nil
}

// corefile is kubeadm's default Corefile (kubeadm's CoreDNS ConfigMap),
// with the addresses of the benchmark: the kubeconfig of the test API server,
// free ports for DNS, health, ready and metrics, and an upstream that does
// not exist (the load asks only cluster names).
func corefile(kubeconfig string, dnsPort, healthPort, readyPort, metricsPort int, upstream string) string {
	return strings.NewReplacer(
		"KUBECONFIG", kubeconfig, "DNSPORT", fmt.Sprint(dnsPort), "HEALTHPORT", fmt.Sprint(healthPort),
		"READYPORT", fmt.Sprint(readyPort), "METRICSPORT", fmt.Sprint(metricsPort), "UPSTREAM", upstream,
	).Replace(`.:DNSPORT {
    bind 127.0.0.1
    errors
    health 127.0.0.1:HEALTHPORT {
       lameduck 5s
    }
    ready 127.0.0.1:READYPORT
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       kubeconfig KUBECONFIG
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus 127.0.0.1:METRICSPORT
    forward . UPSTREAM {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
`)
}
