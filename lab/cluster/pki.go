package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is what the control plane's programs read at start: a CA, the API
// server's certificate signed by it, the key that signs ServiceAccount
// tokens, and a static token file for the lab's administrator. All of it is
// made fresh by every `svclab up --control-plane`, in the state directory.
type pki struct {
	dir        string
	caPEM      []byte
	adminToken string
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// The files, as the flags name them.
func (p *pki) caFile() string         { return p.path("ca.crt") }
func (p *pki) servingCert() string    { return p.path("apiserver.crt") }
func (p *pki) servingKey() string     { return p.path("apiserver.key") }
func (p *pki) serviceAccount() string { return p.path("service-account.key") }
func (p *pki) tokenFile() string      { return p.path("tokens.csv") }

// adminUser is in system:masters: every request is allowed before RBAC is
// even asked, as for kubeadm's admin.conf.
const adminUser = "svclab-admin"

// writePKI makes the files for an API server reached as the given addresses
// and names (its certificate's subject alternative names). The token file
// also holds a token for the kubelet of each of nodes, in NODE.token: the
// identity the Node authorizer limits to that node and its pods
// (system:node:NODE in group system:nodes), which a real node's kubelet
// uses.
func writePKI(dir string, ips []net.IP, names []string, nodes []string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir}
	ca, caKey, err := p.writeCA()
	if err != nil {
		return nil, err
	}
	if err := p.writeServing(ca, caKey, ips, names); err != nil {
		return nil, err
	}
	// kube-apiserver signs ServiceAccount tokens with ES256 as well as RS256.
	if _, err := writeKey(p.serviceAccount()); err != nil {
		return nil, fmt.Errorf("service account key: %w", err)
	}
	if err := p.writeTokens(nodes); err != nil {
		return nil, err
	}
	return p, nil
}

// writeCA makes the CA's key and certificate, which signs the serving
// certificate and is what every client trusts.
func (p *pki) writeCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	caKey, err := writeKey(p.path("ca.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("ca key: %w", err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "svclab-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: %w", err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(p.caFile(), p.caPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return ca, caKey, nil
}

// writeServing makes the API server's key and its certificate for ips and
// names, signed by the CA.
func (p *pki) writeServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, ips []net.IP, names []string) error {
	srvKey, err := writeKey(p.servingKey())
	if err != nil {
		return fmt.Errorf("serving key: %w", err)
	}
	now := time.Now()
	srv := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
		DNSNames:     names,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	return os.WriteFile(p.servingCert(), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}), 0o644)
}

// writeTokens makes the administrator's token and each node's kubelet's,
// and the API server's token file of them.
func (p *pki) writeTokens(nodes []string) error {
	var err error
	if p.adminToken, err = newToken(); err != nil {
		return err
	}
	// --token-auth-file: token,user,uid,"group1,group2".
	lines := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", p.adminToken, adminUser, adminUser)
	for _, node := range nodes {
		nodeToken, err := newToken()
		if err != nil {
			return err
		}
		if err := os.WriteFile(p.path(node+".token"), []byte(nodeToken+"\n"), 0o600); err != nil {
			return err
		}
		nodeUser := "system:node:" + node
		lines += fmt.Sprintf("%s,%s,%s,\"system:nodes\"\n", nodeToken, nodeUser, nodeUser)
	}
	return os.WriteFile(p.tokenFile(), []byte(lines), 0o600)
}

// newToken is 16 random bytes, in hex.
func newToken() (string, error) {
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return "", err
	}
	return hex.EncodeToString(tok), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// writeKey writes a new P-256 private key as PEM to path and returns it.
func writeKey(path string) (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return key, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// writeKubeconfig writes a kubeconfig for user's token at server to path: one
// cluster, one user and one context, all named "svclab" but the user.
func writeKubeconfig(path, server string, caPEM []byte, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["svclab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["svclab"] = &clientcmdapi.Context{Cluster: "svclab", AuthInfo: user}
	cfg.CurrentContext = "svclab"
	return clientcmd.WriteToFile(*cfg, path)
}
