# svcproxy: the two commands a newcomer needs are `make lab` and `make test`.
GO      ?= go
BIN     := bin
# TIMEOUT is go test's limit per package, a guard against a hung test, not the
# suite's budget: test/lab runs the lab tests one at a time under one lock, the
# real node's and Kubernetes' conformance tests among them when their programs
# are cached (docs/conformance.md has the suite's measured time).
TIMEOUT ?= 40m

.PHONY: all build lab lab-ipvs lab-ipvs-shell test test-ipvs vet deps kapi node-bins conformance-bins cluster-bins kind-bin kind-image kind-up kind-down conformance-kind conformance image e2e-images kubeadm-images bench bench-plots clean

all: build

## build: the three binaries into ./bin
build:
	$(GO) build -o $(BIN)/ ./cmd/...

## lab: the narrated demo in network namespaces (root): up, a walk through the
## modes, down
lab: deps build
	$(BIN)/svclab demo

## lab-ipvs: the same demo in a QEMU VM that boots Debian's kernel, which has
## IPVS (this machine's may not), so its IPVS step runs for real; no root needed
## (test/vm/labipvs; TestLab in test/vm runs its IPVS step)
lab-ipvs: deps
	$(GO) run ./test/vm/labipvs

## lab-ipvs-shell: a shell in that VM with svclab on PATH, for tutorials/07-ipvs.md
lab-ipvs-shell: deps
	$(GO) run ./test/vm/labipvs --shell

## deps: Debian packages the tests need (apt-get, only when root and missing)
deps:
	@./scripts/install-deps.sh

vet:
	$(GO) vet ./...

## kapi: build (once, then cached in ~/.cache/svcproxy) the kube-apiserver and
## etcd that the API-server tests start, and the kube-controller-manager and
## kubectl of the control-plane lab (svclab up --control-plane; make lab uses
## it when they are built); exit status 2 means no Go module proxy, and those
## tests skip
kapi:
	@./test/kapi/build.sh || [ $$? -eq 2 ]

## node-bins: what kapi builds, and kubelet and kube-scheduler for the real-node
## lab (test/kapi/README.md); make test never builds them: the tests that need
## them skip and name this target
node-bins:
	@./test/kapi/build.sh -node || [ $$? -eq 2 ]

## conformance-bins: what node-bins builds, and Kubernetes' e2e.test and agnhost
## (test/kapi/README.md); make test never builds them either
conformance-bins:
	@./test/kapi/build.sh -node -conformance || [ $$? -eq 2 ]

## cluster-bins: what node-bins builds, and what a kubeadm cluster adds:
## kubeadm and kube-proxy v1.37.2, CoreDNS v1.14.6 and etcd v3.7.0 (the
## versions kubeadm deploys; test/kapi/README.md); make test never builds them
cluster-bins:
	@./test/kapi/build.sh -node -cluster || [ $$? -eq 2 ]

## kind-bin: kind v0.33.0 from the module proxy (docs/kind.md); make test
## never builds it
kind-bin:
	@./test/kapi/build.sh -apiserver-only -kind || [ $$? -eq 2 ]

## kind-image: the kind node image, built without a registry (images/kindnode,
## docs/kind.md): bin/kind-node.tar, svcproxy.test/kind-node:v1.37.2 for
## `docker load`; Debian from debootstrap (cached), kind v0.33.0's base
## files, kubelet/kubeadm/kubectl and kubeadm's images (root)
kind-image: deps cluster-bins kubeadm-images
	$(GO) run ./images/mkkindnode -o $(BIN)/kind-node.tar

## kind-up: kind v0.33.0 makes deploy/kind/cluster.yaml's three nodes in a
## dockerd kept inside namespaces of its own, with this lab's patch
## (lab/kind/host-patch.yaml: the test address ranges, cgroup v1); then kind
## load image-archive, kubectl apply -k deploy/kind (through lab/kind/overlay,
## its pod range), and a Service and a name checked from a pod on each worker
## (root; lab/kind, docs/kind.md). kind-down removes it all
kind-up: deps build kind-bin image e2e-images
	@test -f $(BIN)/kind-node.tar || { echo "kind-up: no $(BIN)/kind-node.tar: run make kind-image first" >&2; exit 1; }
	$(GO) run ./lab/kind/kindlab up

kind-down:
	$(GO) run ./lab/kind/kindlab down

## conformance-kind: the same tests as make conformance against svcproxy and
## clusterdns on kind's cluster (make kind-up), in each mode of MODE (default
## iptables nftables hybrid), each ending with "N passed, N failed, N skipped"
## and the cluster brought down (root; scripts/conformance-kind.sh,
## docs/conformance.md)
conformance-kind: deps build kind-bin image e2e-images conformance-bins
	@test -f $(BIN)/kind-node.tar || { echo "conformance-kind: no $(BIN)/kind-node.tar: run make kind-image first" >&2; exit 1; }
	MODE="$(MODE)" ./scripts/conformance-kind.sh

## conformance: Kubernetes' own Service and DNS conformance tests (e2e.test
## v1.37.2) against svcproxy and clusterdns, in each mode of MODE, one after the
## other; each mode ends with "N passed, N failed, N skipped", the wall time
## and the largest RSS of the kubelets, containerds, kube-apiserver and etcd,
## and brings the lab down, and several end with the sum (root;
## docs/conformance.md). NODES=1 (default): on the lab's real node, MODE by
## default userspace iptables nftables hybrid. NODES=3: on the kubeadm cluster,
## MODE by default kube-proxy-iptables kube-proxy-nftables (the real kube-proxy
## and CoreDNS), then svcproxy's iptables nftables hybrid userspace
NODES ?= 1
MODE ?=
CONFORMANCE_NEEDS := deps build conformance-bins image e2e-images
ifneq ($(NODES),1)
CONFORMANCE_NEEDS += cluster-bins kubeadm-images
endif
conformance: $(CONFORMANCE_NEEDS)
	NODES="$(NODES)" MODE="$(MODE)" ./scripts/conformance.sh

## image: the container image for kind (docs/kind.md), built without a Docker
## daemon: bin/svcproxy-image.tar, for `kind load image-archive` or `docker load`
image: deps
	$(GO) run ./deploy/image/mkimage -o $(BIN)/svcproxy-image.tar

## e2e-images: the images Kubernetes' e2e tests run (pause, agnhost, busybox,
## glibc-dns-testing, an nginx stand-in), under the names the tests ask for,
## one archive each in bin/e2e-images for `ctr -n k8s.io images import`;
## agnhost's need `make conformance-bins` first (images)
e2e-images: deps
	$(GO) run ./images/mkimages -o $(BIN)/e2e-images

## kubeadm-images: the images a cluster made by kubeadm v1.37.2 runs
## (`kubeadm config images list`: kube-apiserver, kube-controller-manager,
## kube-scheduler, kube-proxy, coredns, etcd, pause) under kubeadm's names, one
## archive each in bin/kubeadm-images for `ctr -n k8s.io images import`; their
## programs from `make cluster-bins` (images, docs/kind.md)
kubeadm-images: deps cluster-bins
	$(GO) run ./images/mkimages -kubeadm -o $(BIN)/kubeadm-images

## test: everything, root-only tests included (they skip without root); then
## the userspace shutdown tests again under the race detector, the only way
## TestShutdownRacesAccept sees a registration that races Shutdown's wait
## (-race needs cgo: gcc, which deps installs)
test: deps vet kapi
	$(GO) test -count=1 -timeout $(TIMEOUT) ./...
	@if [ "$$($(GO) env CGO_ENABLED)" = 1 ]; then \
		$(GO) test -race -count=1 -run 'TestShutdown' ./userspace; \
	else echo "test: no C compiler, so no -race run of ./userspace's shutdown tests"; fi

## bench: benchmarks with side-by-side ratios; figures go to docs/benchmarks.md
bench: deps build
	$(GO) run ./bench/userspace -json docs/benchmarks/userspace.json
	$(GO) test -run '^$$' -bench 'FullSync|OneServiceChange|AddService|SyncCPU|Render' -benchtime 3x -timeout 60m ./bench/iptables/ -args -report $(CURDIR)/docs/benchmarks/iptables-sync.json
	$(GO) test -run '^$$' -bench 'Naive' -benchtime 1x -timeout 30m ./bench/iptables/ -args -report $(CURDIR)/docs/benchmarks/iptables-naive.json
	$(GO) test -run '^$$' -bench 'DataPath$$' -benchtime 2s -count 6 ./bench/iptables/ -args -report $(CURDIR)/docs/benchmarks/iptables-datapath.json
	$(GO) test -run '^$$' -bench 'DataPathInterleaved' -benchtime 4x -timeout 30m -v ./bench/iptables/ -args -report $(CURDIR)/docs/benchmarks/iptables-interleaved.json
	JSON=docs/benchmarks/dns.json bench/dns/run.sh
	$(GO) test -run '^$$' -bench 'OneServiceChange' -benchtime 500x -count 5 ./offload/socklb/ | \
		$(GO) run ./bench/fromtest -bench socklb -o docs/benchmarks/socklb.json \
		-command "go test -run '^$$' -bench 'OneServiceChange' -benchtime 500x -count 5 ./offload/socklb/" \
		-ratio 'one Service change at 10,000 Services (Maps.Sync);kernel / Fake, time;OneServiceChange/kernel/services=10000;OneServiceChange/fake/services=10000;ns/op' \
		-ratio 'the first sync of all 10,000 Services;kernel / Fake, time;OneServiceChange/kernel/services=10000;OneServiceChange/fake/services=10000;first-sync-ms'
	$(GO) test -run '^$$' -bench 'DataPath' -benchtime 30x -timeout 30m -v ./bench/socklb/ -args -report $(CURDIR)/docs/benchmarks/socklb-datapath.json
	$(MAKE) bench-plots

## bench-kubeproxy: svcproxy beside kube-proxy v1.37.2 on one API server,
## every size and mode, rounds interleaved (bench/kubeproxy; root, hours):
## builds kube-apiserver, etcd and kube-proxy first, writes
## docs/benchmarks/kubeproxy-SIZE.json and their plots. Knobs as environment
## variables: SIZES=1000x10,10000x3 ROUNDS=3 PROXIES='svcproxy nftables,...'
## CHANGES=200 FULL_SYNC=1m (bench/kubeproxy's TestCompareKubeProxy)
bench-kubeproxy: deps
	@./test/kapi/build.sh -apiserver-only -kube-proxy >/dev/null
	SVCPROXY_KUBEPROXY_BENCH=1 SVCPROXY_KAPI_BUILD=1 $(GO) test -count=1 -run '^TestCompareKubeProxy$$' -timeout 1200m -v ./bench/kubeproxy
	$(MAKE) bench-plots

## bench-plots: an SVG beside each benchmark's JSON report in docs/benchmarks/
## (bench/plot), as make bench leaves them; no root needed
bench-plots:
	for f in docs/benchmarks/*.json; do $(GO) run ./bench/plot -o "$${f%.json}.svg" "$$f" || exit 1; done

clean:
	rm -rf $(BIN)

## test-ipvs: only the IPVS tests, on Debian's kernel in a QEMU VM
test-ipvs: deps
	$(GO) test -count=1 -v -run 'TestIPVS|TestLab' ./test/vm/
