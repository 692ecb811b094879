package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svcproxy/svcproxy/deploy"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// Client is a clientset for the lab's API server, as its administrator.
// Every connection is made from inside the node, where the server listens.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath("admin"))
	if err != nil {
		return nil, fmt.Errorf("the lab's API server: %w (is the lab up with --control-plane?)", err)
	}
	ns := c.net.NodeNamespace()
	rc.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return topology.DialIn(ctx, ns, network, addr)
	}
	rc.UserAgent = "svclab"
	rc.QPS, rc.Burst = 50, 100
	return kubernetes.NewForConfig(rc)
}

// Kubectl runs `kubectl ARGS...` against the lab's API server, as its
// administrator, in the node, with the given standard streams (nil:
// Config's).
func (c *Cluster) Kubectl(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, args ...string) error {
	st, err := c.net.ReadState()
	if err != nil {
		return err
	}
	if st.Kubectl == "" {
		return errors.New("the lab has no control plane: run `svclab up --control-plane`")
	}
	argv := append([]string{st.Kubectl, "--kubeconfig", c.KubeconfigPath("admin")}, args...)
	return c.net.Exec(ctx, c.net.Plan().Node.Name, argv, stdin, stdout, stderr)
}

// KubectlOut runs kubectl and returns its output; the error carries it too.
func (c *Cluster) KubectlOut(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	var out strings.Builder
	err := c.Kubectl(ctx, stdin, &out, &out, args...)
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// applyDeploy applies the kustomization of deploy/ named kustomization
// ("lab", "realnode") with kubectl, from a copy in the state directory.
func (c *Cluster) applyDeploy(ctx context.Context, kustomization string) error {
	deployDir := filepath.Join(c.net.StateDir(), "deploy")
	if err := deploy.WriteTo(deployDir); err != nil {
		return err
	}
	_, err := c.KubectlOut(ctx, nil, "apply", "--server-side", "-k", filepath.Join(deployDir, kustomization))
	return err
}
