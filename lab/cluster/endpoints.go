package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// Conditions are an endpoint's conditions in an EndpointSlice, what the
// EndpointSlice controller writes from a pod's state:
//
//	running and Ready             ready: true  (serving: true)
//	running, its readiness fails  ready: false, serving: false
//	deleted, still serving        ready: false, serving: true, terminating: true
type Conditions struct {
	Ready, Serving, Terminating bool
}

func (c Conditions) String() string {
	return fmt.Sprintf("ready: %t, serving: %t, terminating: %t", c.Ready, c.Serving, c.Terminating)
}

// SetPodConditions sets the conditions of every endpoint of pod name in the
// file-fed lab's EndpointSlices, as the EndpointSlice controller would once
// the pod's readiness changed or it was deleted, and writes the manifests
// file again; svcproxy and clusterdns reload it. When a condition changed it
// returns once svcproxy has applied the new file (WaitApplied), so that the
// next command already meets the new rules. It returns how many endpoints
// name the pod (one per Service it is behind) and how many of them changed.
func (c *Cluster) SetPodConditions(ctx context.Context, name string, cond Conditions) (n, changed int, err error) {
	st, err := c.net.ReadState()
	if err != nil {
		return 0, 0, err
	}
	if st.Kubectl != "" {
		return 0, 0, errors.New("the lab runs a control plane: the EndpointSlice controller writes the slices from the pods (svclab pod NAME --ready=BOOL sets a pod's readiness; svclab kubectl delete pod NAME deletes it)")
	}
	h, ok := c.net.Plan().Host(name)
	if !ok || h.Role != topology.RolePod {
		return 0, 0, fmt.Errorf("pod %q: no such pod (the lab's pods: %s)", name, podNames(c.net.Plan()))
	}
	path := c.ManifestsPath()
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	out, n, changed, err := setConditions(b, name, h.Addr.String(), cond)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("pod %s is the endpoint of no EndpointSlice in %s", name, path)
	}
	if changed == 0 {
		return n, 0, nil // svcproxy would see the same Snapshot and not sync
	}
	synced, err := c.daemons.syncStateWhenUp(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("svcproxy's metrics: %w", err)
	}
	written := time.Now()
	// Write and rename, as kubectl-style tools do: svcproxy never reads half a file.
	tmp := filepath.Join(filepath.Dir(path), ".services.yaml.tmp")
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return 0, 0, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, 0, err
	}
	return n, changed, c.daemons.WaitApplied(ctx, written, synced)
}

func podNames(p *topology.Plan) string {
	var s string
	for i, h := range p.Pods() {
		if i > 0 {
			s += ", "
		}
		s += h.Name
	}
	return s
}

// setConditions rewrites, in a multi-document manifests file, the conditions
// of the EndpointSlice endpoints that name pod (targetRef) or have its
// address. Comments and the order of fields are kept.
// It returns the new file, how many endpoints name the pod, and how many of
// those had other conditions before.
func setConditions(manifests []byte, pod, addr string, c Conditions) (out []byte, n, changed int, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(manifests))
	var docs []*yaml.Node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, 0, err
		}
		docs = append(docs, &doc)
	}
	for _, doc := range docs {
		if len(doc.Content) == 0 || value(doc.Content[0], "kind") == nil || value(doc.Content[0], "kind").Value != "EndpointSlice" {
			continue
		}
		eps := value(doc.Content[0], "endpoints")
		if eps == nil || eps.Kind != yaml.SequenceNode {
			continue
		}
		for _, ep := range eps.Content {
			if !namesPod(ep, pod, addr) {
				continue
			}
			if conditionsOf(ep) != c {
				changed++
			}
			setMapping(ep, "conditions", conditionsNode(c))
			n++
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	for _, doc := range docs {
		if err := enc.Encode(doc); err != nil {
			return nil, 0, 0, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, 0, 0, err
	}
	return b.Bytes(), n, changed, nil
}

// conditionsOf reads an endpoint's conditions as discovery/v1 defines the
// missing ones: ready unset is ready, serving unset is ready's value,
// terminating unset is false.
func conditionsOf(ep *yaml.Node) Conditions {
	m := value(ep, "conditions")
	get := func(key string, def bool) bool {
		if v := value(m, key); v != nil {
			return v.Value == "true"
		}
		return def
	}
	ready := get("ready", true)
	return Conditions{Ready: ready, Serving: get("serving", ready), Terminating: get("terminating", false)}
}

// value is the value of key in mapping node m, or nil.
func value(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setMapping sets key in mapping m to v, adding it after the addresses when
// it is missing.
func setMapping(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	k := &yaml.Node{Kind: yaml.ScalarNode, Value: key}
	m.Content = append(m.Content, k, v)
}

// namesPod says whether endpoint ep is the pod's: by its targetRef, or by
// its address.
func namesPod(ep *yaml.Node, pod, addr string) bool {
	if ref := value(ep, "targetRef"); ref != nil {
		if n := value(ref, "name"); n != nil {
			return n.Value == pod
		}
	}
	if as := value(ep, "addresses"); as != nil {
		for _, a := range as.Content {
			if a.Value == addr {
				return true
			}
		}
	}
	return false
}

// conditionsNode is c as a flow mapping, "{ready: false, serving: false}":
// terminating is written only when true, as the controller leaves it out.
func conditionsNode(c Conditions) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	add := func(k string, v bool) {
		m.Content = append(m.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: k},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(v)})
	}
	add("ready", c.Ready)
	add("serving", c.Serving)
	if c.Terminating {
		add("terminating", true)
	}
	return m
}
