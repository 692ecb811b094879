// Package exercise checks the learner's exercises: the task at the end of a
// tutorial ("take web-1 out of web's endpoints, its server still running")
// and `svclab check NN`, which reads the lab as it is now and says whether
// it shows what the task asks for, with a hint when it does not.
//
// A check reads what the lab's programs and kernel hold now, never what
// svclab remembers having done: most read what svcproxy itself serves (its
// /status, through views.Services: the mode it runs, each port's path and
// endpoints); others read the node's conntrack table, its rules, a packet
// traced through them or a resolver's questions (kernel.go), or, in the
// labs with more than one process to ask, the node's IPVS, the API server
// or each node's proxy (nodes.go). A
// learner who reaches the state by another way (a manifest edited by hand,
// another command) passes too.
package exercise

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/svcproxy/svcproxy/lab/views"
)

// Lab is what a check reads: lab.Lab, or a fake in unit tests. A check that
// reads more asks for more (KernelLab, IPVSLab, ClusterLab).
type Lab interface {
	Services(ctx context.Context) (*views.ServicesView, error)
}

// Result is what a check found.
type Result struct {
	// Done says the lab shows what the task asks for.
	Done bool
	// Saw says what the check read, in a line: why it passed, or what is
	// still missing.
	Saw string
	// Hint is the next step for a learner who has not done it ("" when
	// Done).
	Hint string
}

// Exercise is one tutorial's task and its check.
type Exercise struct {
	Tutorial string // "03", as `svclab check 03` names it
	Task     string // the task, in a sentence, as the tutorial gives it
	check    checkFunc
}

// A checkFunc reads the lab and says what it found. An error is a lab it could
// not read (not one where the task is undone).
type checkFunc func(context.Context, Lab) (Result, error)

// services is a check that reads only the lab's Services.
func services(f func(*views.ServicesView) Result) checkFunc {
	return func(ctx context.Context, l Lab) (Result, error) {
		v, err := l.Services(ctx)
		if err != nil {
			return Result{}, err
		}
		return f(v), nil
	}
}

// Exercises are the tutorials' exercises, by number.
var Exercises = []Exercise{
	{"01", "Put svcproxy back in the mode where every pod sees the node as its client.", services(checkNodeIsClient)},
	{"02", "Leave the node's conntrack table holding one entry for web: one connection that the kernel alone sent to a pod.", kernel(checkOneDNATEntry)},
	{"03", "Keep web-1 out of web's new connections while its server keeps running and web-1 stays in web's EndpointSlice.", services(checkWeb1Unready)},
	{"04", "Make the outside host's connections to the node port 30081 reach web-1 alone, with the outside host's address kept, no server stopped.", kernel(checkLocalOnlyWeb1)},
	{"05", "Make the kernel remember a second client of web-sticky beside the client.", kernel(checkTwoStickyClients)},
	{"06", "Make the client ask one question, not four, to resolve kube-dns.kube-system.svc.cluster.local, while web still resolves by its short name.", kernel(checkOneQuestion)},
	{"07", "Make web's virtual server send web-0 three of every five new connections, and web-1 and web-2 one each.", checkWebWeighted},
	{"08", "Make hybrid mode promote web-sticky's port to the kernel, as it promoted web's.", services(checkStickyPromoted)},
	{"09", "In iptables mode, make web's port cost eight rules in the nat table instead of eleven, without changing the Service or stopping a server.", kernel(checkWebEightRules)},
	{"10", "Keep web-2 out of web-dual's new connections in both IP families, its server still running.", services(checkWeb2UnreadyBothFamilies)},
	{"11", "Run the cluster DNS in three pods, each one ready behind kube-dns.", checkThreeDNSPods},
	{"12", "In socklb mode, leave in conntrack a connection to web that the socket LB did not rewrite: one that the nftables path beside it DNATed.", kernel(checkSocketLBMissed)},
	{"13", "Switch the proxy on every node to nftables mode, as kubeadm's users do: the ConfigMap, then the pods.", checkNodesNftables},
}

// Find returns tutorial n's exercise.
func Find(n string) (Exercise, error) {
	var have []string
	for _, e := range Exercises {
		if e.Tutorial == n {
			return e, nil
		}
		have = append(have, e.Tutorial)
	}
	sort.Strings(have)
	return Exercise{}, fmt.Errorf("no exercise for tutorial %q: the tutorials with an exercise are %s", n, strings.Join(have, ", "))
}

// Check reads the lab and checks the exercise.
func (e Exercise) Check(ctx context.Context, l Lab) (Result, error) {
	r, err := e.check(ctx, l)
	if err != nil {
		return Result{}, fmt.Errorf("tutorial %s's exercise: reading the lab: %w", e.Tutorial, err)
	}
	return r, nil
}

// port returns the service port named name ("default/web:http").
func port(v *views.ServicesView, name string) (views.ServicePortView, bool) {
	for _, p := range v.Ports {
		if p.Name == name {
			return p, true
		}
	}
	return views.ServicePortView{}, false
}

// checkNodeIsClient: in userspace mode svcproxy's own connection reaches
// the pod, so the pod sees the node; in every kernel mode but a
// masqueraded one it sees the client.
func checkNodeIsClient(v *views.ServicesView) Result {
	web, ok := port(v, "default/web:http")
	if v.Mode == "userspace" && ok && web.Path == "userspace" {
		return Result{Done: true, Saw: "svcproxy runs userspace mode: each connection to web ends in svcproxy, which opens its own to a pod, so the pod sees the node"}
	}
	return Result{Saw: "svcproxy runs " + v.Mode + " mode, where the kernel rewrites the client's packets and the pod sees the client itself",
		Hint: "which mode opens a second connection, from the node to the pod? Lab 01's first section ran it; `svclab mode MODE` switches"}
}

// checkWeb1Unready: web-1 is in web's slice, not ready and not
// terminating (so no new connection reaches it), and the others are
// ready.
func checkWeb1Unready(v *views.ServicesView) Result {
	web, ok := port(v, "default/web:http")
	if !ok {
		return Result{Saw: "the lab has no Service web", Hint: "bring the lab up again: svclab up"}
	}
	var saw []string
	var web1 *views.EndpointView
	others := true
	for i, e := range web.Endpoints {
		saw = append(saw, endpointWords(e))
		if e.Pod == "web-1" {
			web1 = &web.Endpoints[i]
		} else if !e.Ready {
			others = false
		}
	}
	now := "web's endpoints: " + strings.Join(saw, ", ")
	switch {
	case web1 == nil:
		return Result{Saw: now + "; web-1 is not in web's slice at all", Hint: "the task keeps web-1 in the slice: `svclab pod web-1 --start` puts a killed pod back"}
	case web1.Terminating:
		return Result{Saw: now, Hint: "a terminating endpoint still serves when no other is ready; the task asks for the condition that keeps a running pod out of every new connection (`svclab pod --help`)"}
	case web1.Ready:
		return Result{Saw: now, Hint: "web-1 is ready, so it gets its share of new connections: which condition of an EndpointSlice's endpoint keeps it out? (`svclab pod web-1 --help`)"}
	case !others:
		return Result{Saw: now, Hint: "only web-1 is to be left out: make the other pods ready again (`svclab pod NAME --ready=true`)"}
	}
	return Result{Done: true, Saw: now + ": web-1 is in the slice, not ready, so svcproxy sends it no new connection"}
}

func endpointWords(e views.EndpointView) string {
	name := e.Pod
	if name == "" {
		name = e.Addr
	}
	switch {
	case e.Terminating:
		return name + " terminating"
	case !e.Ready:
		return name + " not ready"
	}
	return name + " ready"
}

// checkStickyPromoted: hybrid mode, and web-sticky's port on a kernel
// path.
func checkStickyPromoted(v *views.ServicesView) Result {
	sticky, ok := port(v, "default/web-sticky:http")
	if !ok {
		return Result{Saw: "the lab has no Service web-sticky", Hint: "bring the lab up again: svclab up --mode hybrid"}
	}
	if v.Mode != "hybrid" {
		return Result{Saw: "svcproxy runs " + v.Mode + " mode, which moves no port", Hint: "the task is hybrid mode's: svclab mode hybrid"}
	}
	if sticky.Path == "userspace" {
		return Result{Saw: "web-sticky:http is in userspace (" + fmt.Sprint(sticky.Userspace) + " connections through svcproxy so far)",
			Hint: "a port is promoted when its new connections stay above the rate for long enough: what did Lab 08 send to web? (svclab traffic --rate ... --n ... SERVICE)"}
	}
	return Result{Done: true, Saw: "web-sticky:http's path is " + sticky.Path + ": hybrid promoted it"}
}

// checkWeb2UnreadyBothFamilies: web-dual has an endpoint per pod in each
// family's EndpointSlice; web-2's are both not ready (and not
// terminating), the others' ready.
func checkWeb2UnreadyBothFamilies(v *views.ServicesView) Result {
	dual, ok := port(v, "default/web-dual:http")
	if !ok {
		return Result{Saw: "the lab has no Service web-dual", Hint: "bring the lab up again: svclab up"}
	}
	families := map[string]string{} // "IPv4 web-2" -> its words
	var saw []string
	web2, others := 0, true
	for _, e := range dual.Endpoints {
		family := "IPv4"
		if strings.HasPrefix(e.Addr, "[") {
			family = "IPv6"
		}
		words := endpointWords(e)
		families[family+" "+e.Pod] = words
		saw = append(saw, family+" "+words)
		switch {
		case e.Pod == "web-2" && !e.Ready && !e.Terminating:
			web2++
		case e.Pod != "web-2" && !e.Ready:
			others = false
		}
	}
	now := "web-dual's endpoints: " + strings.Join(saw, ", ")
	switch {
	case families["IPv4 web-2"] == "" || families["IPv6 web-2"] == "":
		return Result{Saw: now + "; web-2 is missing from a family", Hint: "the task keeps web-2 in both slices: `svclab pod web-2 --start` puts a killed pod back"}
	case web2 == 1:
		return Result{Saw: now, Hint: "web-2 is out of one family only: a pod's readiness is one condition, which each family's slice carries"}
	case web2 == 0:
		return Result{Saw: now, Hint: "web-2 is ready in both families: the pod's condition is what both slices carry (lab 03 changed it for web)"}
	case !others:
		return Result{Saw: now, Hint: "only web-2 is to be left out: make the other pods ready again (`svclab pod NAME --ready=true`)"}
	}
	return Result{Done: true, Saw: now + ": web-2 is not ready in both families' slices, from one change of the pod"}
}
