package kapitest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svcproxy/svcproxy/internal/k8sbin"
)

// ServiceCIDR is the --service-cluster-ip-range: the test range for Service IPs.
const ServiceCIDR = "198.18.0.0/16"

// Timeouts for a child to become ready. Generous: the machine may be busy
// with other tests, and a timeout here is a failure, not a measurement.
const (
	etcdReadyTimeout      = 60 * time.Second
	apiserverReadyTimeout = 2 * time.Minute
	// portAttempts bounds retries when another process takes a free port
	// between freePort and the child's bind.
	portAttempts = 3
)

// Server is a running etcd and kube-apiserver pair.
type Server struct {
	// Kubeconfig is the path of a kubeconfig file for the admin user (a
	// system:masters token), the way code under test is usually configured.
	Kubeconfig string
	// Config is the same as a rest.Config.
	Config *rest.Config
	// Client is a clientset on Config.
	Client kubernetes.Interface

	dir       string
	bins      k8sbin.Binaries
	creds     *credentials
	etcd      *process
	etcdURL   string
	apiserver *process
	port      int
}

// Start runs etcd and kube-apiserver on loopback with random free ports and a
// temporary directory, and waits until kube-apiserver's /readyz passes.
// t.Cleanup stops both and removes everything.
func Start(t testing.TB) *Server {
	t.Helper()
	bins := Binaries(t)
	began := time.Now()
	s := &Server{dir: t.TempDir(), bins: bins}
	t.Cleanup(func() { s.stop(t) }) // after TempDir's: runs before its removal
	var err error
	if s.creds, err = writeCredentials(s.dir); err != nil {
		t.Fatalf("kapitest: %v", err)
	}
	if err := s.startEtcd(); err != nil {
		t.Fatalf("kapitest: %v", err)
	}
	if err := s.startAPIServer(0); err != nil {
		t.Fatalf("kapitest: %v", err)
	}
	s.Kubeconfig = filepath.Join(s.dir, "kubeconfig")
	if err := writeKubeconfig(s.Kubeconfig, s.url(), s.creds); err != nil {
		t.Fatalf("kapitest: kubeconfig: %v", err)
	}
	if s.Config, err = clientcmd.BuildConfigFromFlags("", s.Kubeconfig); err != nil {
		t.Fatalf("kapitest: kubeconfig %s: %v", s.Kubeconfig, err)
	}
	// client-go's default 5 QPS would make a busy test wait on itself.
	s.Config.QPS, s.Config.Burst = 200, 400
	if s.Client, err = kubernetes.NewForConfig(s.Config); err != nil {
		t.Fatalf("kapitest: clientset: %v", err)
	}
	t.Logf("kapitest: kube-apiserver %s ready in %s (etcd %s)", s.url(), time.Since(began).Round(time.Millisecond), s.etcdURL)
	return s
}

// Restart stops kube-apiserver and starts it again on the same port, and waits
// until it is ready. etcd keeps running, so every object is still there; open
// watches break and clients must re-list, as after a control-plane upgrade.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	began := time.Now()
	s.apiserver.stop()
	stopped := time.Now()
	if err := s.startAPIServer(s.port); err != nil {
		t.Fatalf("kapitest: restart: %v", err)
	}
	t.Logf("kapitest: kube-apiserver restarted: stopped in %s, ready again in %s",
		stopped.Sub(began).Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
}

// Namespace creates a namespace named "svcp-" and a random suffix, and deletes
// it at cleanup. Without a controller-manager the namespace stays Terminating;
// the Server goes away at the end of the test anyway.
func (s *Server) Namespace(t testing.TB) string {
	t.Helper()
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatalf("kapitest: namespace name: %v", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svcp-" + hex.EncodeToString(suffix)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kapitest: create namespace %s: %v", ns.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

func (s *Server) url() string { return "https://127.0.0.1:" + strconv.Itoa(s.port) }

// stop ends kube-apiserver, then etcd; on a failed test it logs their last
// lines first.
func (s *Server) stop(t testing.TB) {
	for _, p := range []*process{s.apiserver, s.etcd} {
		if p == nil {
			continue
		}
		if t.Failed() {
			t.Logf("kapitest: last lines of %s:\n%s", p.log, p.tail(30))
		}
		p.stop()
	}
}

// startEtcd starts a single-member etcd on two free loopback ports and waits
// for its /health.
func (s *Server) startEtcd() error {
	var err error
	for range portAttempts {
		var client, peer int
		if client, err = freePort(); err != nil {
			return err
		}
		if peer, err = freePort(); err != nil {
			return err
		}
		s.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", client)
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
		s.etcd, err = startProcess(s.dir, "etcd", s.bins.Etcd,
			"--name=kapitest",
			"--data-dir="+filepath.Join(s.dir, "etcd"),
			"--listen-client-urls="+s.etcdURL,
			"--advertise-client-urls="+s.etcdURL,
			"--listen-peer-urls="+peerURL,
			"--initial-advertise-peer-urls="+peerURL,
			"--initial-cluster=kapitest="+peerURL,
			// Test data need not survive a power cut; fsync per write is
			// most of etcd's latency on a shared disk.
			"--unsafe-no-fsync",
			"--log-level=warn",
		)
		if err != nil {
			return err
		}
		err = waitReady(s.etcd, etcdReadyTimeout, http.DefaultClient, s.etcdURL+"/health", "")
		if err == nil || !portTaken(s.etcd) {
			return err
		}
		s.etcd.stop()
	}
	return err
}

// startAPIServer starts kube-apiserver on port (0: a free one) and waits for
// its /readyz.
func (s *Server) startAPIServer(port int) error {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.creds.caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
	defer client.CloseIdleConnections()
	var err error
	for range portAttempts {
		s.port = port
		if port == 0 {
			if s.port, err = freePort(); err != nil {
				return err
			}
		}
		if s.apiserver, err = startProcess(s.dir, "kube-apiserver", s.bins.APIServer, s.apiserverArgs()...); err != nil {
			return err
		}
		err = waitReady(s.apiserver, apiserverReadyTimeout, client, s.url()+"/readyz", s.creds.token)
		if err == nil || port != 0 || !portTaken(s.apiserver) {
			return err
		}
		s.apiserver.stop()
	}
	return err
}

// apiserverArgs are kube-apiserver's flags; each one that is not a plain path
// says why it is there.
func (s *Server) apiserverArgs() []string {
	c := s.creds
	return []string{
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.port),
		// The "kubernetes" Service's endpoints would point at the advertise
		// address; the endpoint reconciler refuses a loopback one.
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--etcd-servers=" + s.etcdURL,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--tls-cert-file=" + c.certFile,
		"--tls-private-key-file=" + c.keyFile,
		// Unused while the TLS files are given; keeps the default
		// /var/run/kubernetes out of reach.
		"--cert-dir=" + filepath.Join(s.dir, "certs"),
		"--token-auth-file=" + c.tokenFile,
		"--authorization-mode=RBAC",
		// As kubeadm's API server: kube-proxy's DaemonSet (deploy/kubeadm)
		// is privileged, and would be refused otherwise.
		"--allow-privileged=true",
		"--service-account-key-file=" + c.saKeyFile,
		"--service-account-signing-key-file=" + c.saKeyFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		// On SIGTERM, net/http's Shutdown waits for open connections to
		// go idle, and a watch never does: the default timeout is the
		// 60s request timeout. With this flag it is 2s (and new requests
		// get 429 + Retry-After meanwhile, as in a rolling restart).
		"--shutdown-send-retry-after=true",
		// One client per test: flow control only costs start time.
		"--enable-priority-and-fairness=false",
		"--profiling=false",
	}
}

// waitReady polls url until it answers 200, the process exits, or timeout.
func waitReady(p *process, timeout time.Duration, client *http.Client, url, token string) error {
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		if done, err := p.exited(); done {
			return fmt.Errorf("%s exited before it was ready (%v); last lines of %s:\n%s", p.name, err, p.log, p.tail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %s: %s; last lines of %s:\n%s", p.name, timeout, url, last, p.log, p.tail(30))
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if resp, err := client.Do(req); err != nil {
			last = err.Error()
		} else {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		}
		select {
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// portTaken reports whether p failed because its port was taken meanwhile.
func portTaken(p *process) bool {
	return strings.Contains(p.tail(50), "address already in use")
}
