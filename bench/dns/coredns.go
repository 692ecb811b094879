package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// coreDNSVersion is the CoreDNS the benchmark compares against; the nested
// module bench/dns/coredns pins it (go.mod, go.sum).
const coreDNSVersion = "v1.15.0"

// buildCoreDNS returns the CoreDNS binary built from bench/dns/coredns, from
// the cache ($XDG_CACHE_HOME/svcproxy/coredns or ~/.cache/...) or built into
// it first (from the Go module proxy, as test/kapi builds kube-apiserver;
// a cold build takes minutes). root is the svcproxy repository.
func buildCoreDNS(ctx context.Context, root string) (string, error) {
	modDir := filepath.Join(root, "bench", "dns", "coredns")
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(modDir, f))
		if err != nil {
			return "", fmt.Errorf("coredns module: %w", err)
		}
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	h.Write([]byte("CGO_ENABLED=0 -ldflags=-s -w")) // a build of other flags is another binary
	dir := filepath.Join(cache, "svcproxy", "coredns", "coredns-"+coreDNSVersion+"_"+hex.EncodeToString(h.Sum(nil))[:12])
	bin := filepath.Join(dir, "coredns")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	// One build at a time, across processes; the kernel drops the lock of a
	// process that dies.
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(os.Stderr, "bench/dns: building CoreDNS %s into %s (a cold build takes minutes)\n", coreDNSVersion, dir)
	// As CoreDNS's Makefile builds its releases: static, without symbol
	// tables; clusterdns is built the same way (deploy/image).
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(tmp, "coredns"), "github.com/coredns/coredns")
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build github.com/coredns/coredns@%s: %w\n%s", coreDNSVersion, err, out)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return bin, nil
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
