package kind

import (
	"context"
	"fmt"
	"strings"
)

// CheckNamespace holds what Check makes; Check deletes it at the end.
const CheckNamespace = "kindlab-check"

// checkWeb is a Deployment "web" of two agnhost netexec pods behind the
// ClusterIP Service "web"; checkClient a client pod pinned to a worker.
const checkWeb = `apiVersion: v1
kind: Namespace
metadata:
  name: ` + CheckNamespace + `
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: ` + CheckNamespace + `
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: %[1]s
        imagePullPolicy: Never
        args: [netexec, --http-port=8080]
        readinessProbe:
          httpGet: {path: /hostname, port: 8080}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: ` + CheckNamespace + `
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
`

const checkClient = `---
apiVersion: v1
kind: Pod
metadata:
  name: client-%[2]s
  namespace: ` + CheckNamespace + `
spec:
  nodeName: %[2]s
  containers:
  - name: client
    image: %[1]s
    imagePullPolicy: Never
    args: [pause]
`

// Check asks, from a pod on each worker, the name
// web.kindlab-check.svc.cluster.local (clusterdns, through the Service
// kube-dns, through svcproxy) and the Service web at that name (svcproxy),
// with agnhost's image (make e2e-images) loaded by `kind load
// image-archive`. It returns one line per worker, and deletes what it made.
func (c *Cluster) Check(ctx context.Context, agnhostArchive, agnhostRef string) ([]string, error) {
	step := c.stepper()
	if err := step("kind load image-archive "+agnhostArchive, func() error {
		return c.kind(ctx, "load", "image-archive", agnhostArchive, "--name", ClusterName)
	}); err != nil {
		return nil, err
	}
	out, err := c.Kubectl(ctx, nil, "get", "nodes", "-l", "!node-role.kubernetes.io/control-plane", "-o", "jsonpath={.items[*].metadata.name}")
	if err != nil {
		return nil, err
	}
	workers := strings.Fields(out)
	if len(workers) == 0 {
		return nil, fmt.Errorf("kind: no worker nodes")
	}
	manifest := fmt.Sprintf(checkWeb, agnhostRef)
	for _, w := range workers {
		manifest += fmt.Sprintf(checkClient, agnhostRef, w)
	}
	defer c.Kubectl(context.WithoutCancel(ctx), nil, "delete", "namespace", CheckNamespace, "--wait=false")
	if err := step("the web Service and a client pod on each worker", func() error {
		if _, err := c.Kubectl(ctx, strings.NewReader(manifest), "apply", "-f", "-"); err != nil {
			return err
		}
		_, err := c.Kubectl(ctx, nil, "-n", CheckNamespace, "wait", "--for=condition=Ready", "pods", "--all", "--timeout=180s")
		return err
	}); err != nil {
		return nil, err
	}
	clusterIP, err := c.Kubectl(ctx, nil, "-n", CheckNamespace, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		return nil, err
	}
	name := "web." + CheckNamespace + ".svc.cluster.local"
	var lines []string
	for _, w := range workers {
		client := "client-" + w
		addr, err := c.exec(ctx, client, "dig", "+short", "+time=2", "+tries=3", name)
		if err != nil {
			return lines, err
		}
		if addr != clusterIP {
			return lines, fmt.Errorf("kind: on %s, %s resolved to %q, want the Service's ClusterIP %s", w, name, addr, clusterIP)
		}
		// The pods are Ready before every node's svcproxy has their
		// endpoints: until then the ClusterIP refuses (no endpoints), which
		// curl retries only when told.
		host, err := c.exec(ctx, client, "curl", "-sS", "--max-time", "5", "--retry", "10", "--retry-delay", "1", "--retry-connrefused", "http://"+name+"/hostname")
		if err != nil {
			return lines, err
		}
		if !strings.HasPrefix(host, "web-") {
			return lines, fmt.Errorf("kind: on %s, http://%s/hostname answered %q, want a web pod's name", w, name, host)
		}
		lines = append(lines, fmt.Sprintf("%s: %s is %s (clusterdns); http://%s/hostname: %s (svcproxy)", w, name, addr, name, host))
	}
	for _, l := range lines {
		fmt.Fprintln(c.cfg.Log, "kind:", l)
	}
	return lines, nil
}

func (c *Cluster) exec(ctx context.Context, pod string, argv ...string) (string, error) {
	out, err := c.Kubectl(ctx, nil, append([]string{"-n", CheckNamespace, "exec", pod, "--"}, argv...)...)
	return strings.TrimSpace(out), err
}
