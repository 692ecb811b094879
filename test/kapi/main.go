// Command kapi builds (or finds in the cache) the kube-apiserver and etcd that
// svcproxy's tests run, and prints where they are, one "name=path" a line:
//
//	go run ./test/kapi
//	APISERVER=/root/.cache/svcproxy/kapi/kube-apiserver-v1.37.2_etcd-v3.6.16_0123abcd4567/kube-apiserver
//	ETCD=/root/.cache/svcproxy/kapi/kube-apiserver-v1.37.2_etcd-v3.6.16_0123abcd4567/etcd
//
// The versions are pinned by the two nested modules beside this file,
// apiserver/ and etcd/; see README.md. The tests call the same code
// (internal/kapitest/kapibin), so running this first only moves the cold build
// out of the first test's time.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/svcproxy/svcproxy/internal/kapitest/kapibin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bins, err := kapibin.Build(ctx, kapibin.Config{Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kapi:", err)
		if errors.Is(err, kapibin.ErrUnavailable) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	fmt.Printf("APISERVER=%s\nETCD=%s\n", bins.APIServer, bins.Etcd)
}
