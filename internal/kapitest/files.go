package kapitest

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

// adminUser is the one user of the token file, in system:masters: every
// request is allowed before RBAC is even asked.
const adminUser = "svcproxy-admin"

// credentials are the files kube-apiserver reads at start, made fresh for
// every Server so nothing is shared between tests.
type credentials struct {
	token     string // the admin's bearer token
	caPEM     []byte // the serving certificate, self-signed: it is its own CA
	certFile  string // --tls-cert-file
	keyFile   string // --tls-private-key-file
	saKeyFile string // --service-account-key-file and --service-account-signing-key-file
	tokenFile string // --token-auth-file
}

// writeCredentials writes a serving certificate for 127.0.0.1, a service
// account signing key and a token file into dir.
func writeCredentials(dir string) (*credentials, error) {
	c := &credentials{
		certFile:  filepath.Join(dir, "serving.crt"),
		keyFile:   filepath.Join(dir, "serving.key"),
		saKeyFile: filepath.Join(dir, "service-account.key"),
		tokenFile: filepath.Join(dir, "tokens.csv"),
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	c.token = hex.EncodeToString(tok)
	// Format of --token-auth-file: token,user,uid,"group1,group2".
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", c.token, adminUser, adminUser)
	if err := os.WriteFile(c.tokenFile, []byte(line), 0o600); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	keyPEM, err := writeKey(c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("serving key: %w", err)
	}
	if c.caPEM, err = selfSigned(keyPEM); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if err := os.WriteFile(c.certFile, c.caPEM, 0o644); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	// kube-apiserver signs service account tokens with ES256 as well as RS256;
	// a P-256 key is made in microseconds where RSA takes a visible moment.
	if _, err := writeKey(c.saKeyFile); err != nil {
		return nil, fmt.Errorf("service account key: %w", err)
	}
	return c, nil
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

// selfSigned returns a PEM certificate for 127.0.0.1 and localhost, valid for a
// day, that is its own CA: clients trust it by putting it in their root pool.
func selfSigned(key *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kapitest"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// writeKubeconfig writes a kubeconfig for server to path: one cluster, one
// token user and one context, all named "kapitest".
func writeKubeconfig(path, server string, c *credentials) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kapitest"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: c.caPEM}
	cfg.AuthInfos["kapitest"] = &clientcmdapi.AuthInfo{Token: c.token}
	cfg.Contexts["kapitest"] = &clientcmdapi.Context{Cluster: "kapitest", AuthInfo: "kapitest"}
	cfg.CurrentContext = "kapitest"
	return clientcmd.WriteToFile(*cfg, path)
}
