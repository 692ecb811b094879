package lab

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/kapitest"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/pods"
)

// followTimeout bounds how long the lab may take to follow a change: the
// StatefulSet controller, the kubelet, the EndpointSlice controller, then
// svcproxy's next sync (--min-sync-period 1s) or clusterdns's. A failure
// deadline on a busy machine, not a measurement.
const followTimeout = time.Minute

// cpLab drives a control-plane lab the way a learner does, with the built
// svclab, and reads traffic through package lab.
type cpLab struct {
	t   *testing.T
	bin string
	l   *lab.Lab
}

// svclab runs a command and fails the test if it fails.
func (c *cpLab) svclab(args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := svclab(ctx, c.bin, args...)
	if err != nil {
		c.t.Fatalf("svclab %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// answers sends n requests to target from the client and returns which pods
// answered, sorted, and how many requests failed.
func (c *cpLab) answers(target string, n int) ([]string, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tally, err := c.l.Traffic(ctx, pods.TrafficOptions{Target: target, N: n})
	if err != nil && tally == nil {
		c.t.Fatalf("traffic %s: %v", target, err)
	}
	if tally == nil {
		return nil, n
	}
	var names []string
	for _, p := range tally.Pods {
		names = append(names, p.Pod)
	}
	sort.Strings(names)
	return names, tally.Failed
}

// dig returns the addresses a name resolves to from the client, sorted:
// args are dig's ("-t", "AAAA", NAME).
func (c *cpLab) dig(args ...string) []string {
	c.t.Helper()
	out := c.svclab(append([]string{"exec", "client", "--", "dig", "+short"}, args...)...)
	ips := strings.Fields(out)
	sort.Strings(ips)
	return ips
}

// eventually polls cond until it holds, and returns how long that took.
func (c *cpLab) eventually(what string, cond func() (bool, string)) time.Duration {
	c.t.Helper()
	start := time.Now()
	for {
		ok, got := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > followTimeout {
			c.t.Fatalf("%s: not after %s; last: %s", what, followTimeout, got)
		}
	}
}

// servedBy is a condition: every request to target answered, by exactly the
// pods want.
func (c *cpLab) servedBy(target string, n int, want ...string) func() (bool, string) {
	return func() (bool, string) {
		got, failed := c.answers(target, n)
		return failed == 0 && slices.Equal(got, want), fmt.Sprintf("answers from %v, %d failed", got, failed)
	}
}

// servedBy6 is servedBy over IPv6: target's name resolved to its AAAA.
func (c *cpLab) servedBy6(target string, n int, want ...string) func() (bool, string) {
	return func() (bool, string) {
		got, _, failed := c.tally(pods.TrafficOptions{Target: target, N: n, IPv6: true})
		return failed == 0 && slices.Equal(got, want), fmt.Sprintf("answers from %v, %d failed", got, failed)
	}
}

// resolvesTo6 is a condition: name's AAAA records are exactly ips.
func (c *cpLab) resolvesTo6(name string, ips ...string) func() (bool, string) {
	return func() (bool, string) {
		got := c.dig("-t", "AAAA", name)
		return slices.Equal(got, ips), fmt.Sprintf("%s AAAA is %v", name, got)
	}
}

// resolvesTo is a condition: name resolves to exactly ips.
func (c *cpLab) resolvesTo(name string, ips ...string) func() (bool, string) {
	return func() (bool, string) {
		got := c.dig(name)
		return slices.Equal(got, ips), fmt.Sprintf("%s is %v", name, got)
	}
}

// TestControlPlane runs the lab on a real control plane, in userspace,
// iptables and hybrid mode, and checks that traffic and DNS follow the cluster
// as a learner changes it with kubectl: a StatefulSet scaled up and down, a
// pod turned unready and ready again, a pod deleted (and made anew by its
// StatefulSet). Then the RBAC of deploy/ is shown minimal, and svcproxy from
// the container image runs with the DaemonSet's arguments.
func TestControlPlane(t *testing.T) {
	netnstest.RequireRoot(t, lab.DemoTools...)
	kapitest.ControlPlaneBinaries(t) // skips, with advice, when `make kapi` has not built them
	bin := build(t)
	t.Cleanup(func() {
		down(t, bin)
		requireClean(t, bin)
	})
	l, err := lab.New(lab.Config{Stdout: io.Discard, Self: bin + "/svclab", BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	c := &cpLab{t: t, bin: bin, l: l}
	start := time.Now()
	out := c.svclab("up", "--control-plane")
	t.Logf("svclab up --control-plane (%s):\n%s", time.Since(start).Round(time.Millisecond), out)

	for _, mode := range []string{"userspace", "iptables", "hybrid"} {
		t.Run(mode, func(t *testing.T) {
			c.t = t
			if mode != "userspace" {
				c.svclab("mode", mode)
			}
			checkLabConfigMap(c, mode)
			followCluster(c)
		})
	}
	c.t = t
	t.Run("rbac", func(t *testing.T) { c.t = t; checkLabRBAC(c) })
	t.Run("image", func(t *testing.T) { c.t = t; runImage(c) })
}

// followCluster is one round of changes, ending where it began.
func followCluster(c *cpLab) {
	t := c.t
	web := []string{"web-0", "web-1", "web-2"}
	c.eventually("web served by web-0..2", c.servedBy("web", 12, web...))

	// Scale up: the StatefulSet controller makes web-3, the kubelet starts
	// it, the EndpointSlice controller adds it, svcproxy sends to it.
	begin := time.Now()
	c.svclab("kubectl", "scale", "statefulset", "web", "--replicas=4")
	took := c.eventually("web-3 answers", func() (bool, string) {
		got, _ := c.answers("web", 4)
		return slices.Contains(got, "web-3"), fmt.Sprintf("answers from %v", got)
	})
	t.Logf("kubectl scale statefulset web --replicas=4 -> traffic reached web-3 in %s (the scale command itself included: %s)",
		took.Round(10*time.Millisecond), time.Since(begin).Round(10*time.Millisecond))
	c.eventually("web served by web-0..3", c.servedBy("web", 16, append(web, "web-3")...))
	// Dual-stack: web-3 has an IPv6 address too (podIPs), and the
	// EndpointSlice controller adds it to web-dual's IPv6 slice.
	c.eventually("web-dual over IPv6 served by web-0..3", c.servedBy6("web-dual", 16, append(web, "web-3")...))
	c.eventually("web-dual AAAA", c.resolvesTo6("web-dual.default.svc.cluster.local", "2001:db8:18::24"))

	// DNS follows a headless Service's pods: db-2 has an address of the pool.
	c.svclab("kubectl", "scale", "statefulset", "db", "--replicas=3")
	c.eventually("db resolves to three pods", func() (bool, string) {
		got := c.dig("db.default.svc.cluster.local")
		return len(got) == 3, fmt.Sprintf("db is %v", got)
	})

	// Readiness: the pod keeps running, only its endpoint goes not-ready.
	c.svclab("pod", "web-1", "--ready=false")
	c.eventually("web-1 unready gets no traffic", c.servedBy("web", 16, "web-0", "web-2", "web-3"))
	c.svclab("pod", "db-1", "--ready=false")
	c.eventually("db-1 unready leaves DNS", func() (bool, string) {
		got := c.dig("db.default.svc.cluster.local")
		return len(got) == 2 && !slices.Contains(got, "198.19.1.21"), fmt.Sprintf("db is %v", got)
	})
	c.svclab("pod", "web-1", "--ready=true")
	c.svclab("pod", "db-1", "--ready=true")
	c.eventually("web-1 ready again", c.servedBy("web", 16, append(web, "web-3")...))

	// Delete a pod: it goes (graceful deletion, the kubelet stops it), and
	// its StatefulSet makes a new one of the same name, which gets traffic.
	uid := strings.TrimSpace(c.svclab("kubectl", "get", "pod", "web-0", "-o", "jsonpath={.metadata.uid}"))
	c.svclab("kubectl", "delete", "pod", "web-0", "--wait=true")
	c.eventually("a new web-0", func() (bool, string) {
		now, _ := svclab(context.Background(), c.bin, "kubectl", "get", "pod", "web-0", "-o", "jsonpath={.metadata.uid}")
		return now != "" && strings.TrimSpace(now) != uid, "uid " + now
	})
	c.eventually("the new web-0 served", c.servedBy("web", 16, append(web, "web-3")...))

	// Scale down again: web-3 and db-2 are deleted, and leave traffic and DNS.
	c.svclab("kubectl", "scale", "statefulset", "web", "--replicas=3")
	c.svclab("kubectl", "scale", "statefulset", "db", "--replicas=2")
	c.eventually("web back to web-0..2", c.servedBy("web", 12, web...))
	c.eventually("db back to db-0, db-1", c.resolvesTo("db.default.svc.cluster.local", "198.19.1.20", "198.19.1.21"))
}

// checkLabRBAC shows svcproxy's token (the RBAC of deploy/rbac, as the lab
// applied it) can read what it watches and nothing else.
func checkLabRBAC(c *cpLab) {
	as := func(user string, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, _ := svclab(ctx, c.bin, append([]string{"kubectl", "--kubeconfig", c.l.Cluster().KubeconfigPath(user)}, args...)...)
		return strings.TrimSpace(out)
	}
	for _, user := range []string{"svcproxy", "clusterdns"} {
		for _, res := range []string{"services", "endpointslices.discovery.k8s.io"} {
			if got := as(user, "auth", "can-i", "watch", res, "-A"); got != "yes" {
				c.t.Errorf("%s: can-i watch %s = %q, want yes", user, res, got)
			}
		}
		// svcproxy watches its own Node (traffic distribution, /healthz),
		// through an informer, which lists and watches but never gets.
		// clusterdns watches Namespaces and Pods, as CoreDNS does (a name in
		// a namespace that does not exist, "pods verified").
		nodes, dns := "no", "no"
		if user == "svcproxy" {
			nodes = "yes"
		} else {
			dns = "yes"
		}
		for _, v := range []struct{ verb, res, want string }{
			{"list", "secrets", "no"}, {"watch", "endpoints", "no"}, {"list", "nodes", nodes}, {"watch", "nodes", nodes},
			{"get", "nodes", "no"}, {"list", "pods", dns}, {"watch", "namespaces", dns}, {"get", "pods", "no"},
			{"create", "services", "no"}, {"delete", "endpointslices.discovery.k8s.io", "no"},
		} {
			if got := as(user, "auth", "can-i", v.verb, v.res, "-A"); got != v.want {
				c.t.Errorf("%s: can-i %s %s = %q, want %s", user, v.verb, v.res, got, v.want)
			}
		}
		if got := as(user, "get", "secrets", "-n", "kube-system"); !strings.Contains(got, "Forbidden") {
			c.t.Errorf("%s: kubectl get secrets: %q, want Forbidden", user, got)
		}
	}
}

// checkLabConfigMap checks that the ConfigMap kube-system/svcproxy, which
// a learner of kube-proxy's lessons reads first, says what svcproxy runs
// with, and that nothing reads it.
func checkLabConfigMap(c *cpLab, mode string) {
	c.t.Helper()
	var cm corev1.ConfigMap
	getJSON(c, &cm, "-n", "kube-system", "get", "configmap", "svcproxy")
	want := map[string]string{"mode": mode, "offload": "nftables", "cluster-cidr": "198.19.0.0/17,2001:db8:19::/104"}
	for k, v := range want {
		if cm.Data[k] != v {
			c.t.Errorf("configmap kube-system/svcproxy: %s is %q; svcproxy runs with %q", k, cm.Data[k], v)
		}
	}
	if note := cm.Annotations["svclab.svcproxy.io/not-read"]; !strings.Contains(note, "Nothing reads this ConfigMap") {
		c.t.Errorf("configmap kube-system/svcproxy: no annotation says that nothing reads it: %v", cm.Annotations)
	}
}
