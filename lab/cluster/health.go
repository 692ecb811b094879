package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// httpOK is a check that GET url answers 200.
func httpOK(client *http.Client, url, token string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
}

// nodeHTTPS is an HTTPS client whose connections start inside the node and
// trust the lab's CA.
func nodeHTTPS(lab *topology.Net, caPEM []byte) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return nodeTLS(lab, &tls.Config{RootCAs: roots})
}

// nodeHTTPSInsecure is for kube-controller-manager's /healthz, served with a
// certificate it made for itself at start.
func nodeHTTPSInsecure(lab *topology.Net) *http.Client {
	return nodeTLS(lab, &tls.Config{InsecureSkipVerify: true})
}

func nodeTLS(lab *topology.Net, tc *tls.Config) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   tc,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return topology.DialIn(ctx, lab.NodeNamespace(), network, addr)
			},
		},
	}
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// nodeHTTP is an HTTP client whose connections start inside the node.
func nodeHTTP(lab *topology.Net) *http.Client { return httpIn(lab.NodeNamespace()) }

// httpIn is an HTTP client whose connections start in network namespace ns.
func httpIn(ns string) *http.Client {
	return &http.Client{
		Timeout: topology.Patient(2 * time.Second),
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return topology.DialIn(ctx, ns, network, addr)
			},
		},
	}
}

// metricsGet fetches path from the metrics server of the proxy (svcproxy's
// or kube-proxy's, both at MetricsAddr) with client, and returns the body;
// a status other than 200 is an error that comes with the body.
func metricsGet(ctx context.Context, client *http.Client, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+MetricsAddr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(b), err
}
