package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// machine is these machines' bounding set: every capability up to
// CAP_CHECKPOINT_RESTORE (40) but CAP_SYS_RESOURCE (24).
const machine = bounding(0x000001fffeffffff)

func TestParseBounding(t *testing.T) {
	status := []byte("Name:\tcat\nCapInh:\t0000000000000000\nCapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\n")
	b, err := parseBounding(status)
	if err != nil || b != machine {
		t.Fatalf("parseBounding = %x, %v; want %x", uint64(b), err, uint64(machine))
	}
	if b.allows("CAP_SYS_RESOURCE") || !b.allows("CAP_SYS_ADMIN") || !b.allows("cap_net_admin") {
		t.Error("allows: want SYS_RESOURCE refused, SYS_ADMIN and net_admin (any case) allowed")
	}
	if !b.allows("CAP_FROM_THE_FUTURE") {
		t.Error("allows: an unknown name is runc's to judge, want it kept")
	}
	if _, err := parseBounding([]byte("Name:\tcat\n")); err == nil {
		t.Error("parseBounding without CapBnd: want an error")
	}
}

// allCaps is what a privileged container asks for: every capability known.
func allCaps() []any {
	var all []any
	for name := range capBits {
		all = append(all, name)
	}
	slices.SortFunc(all, func(a, b any) int { return capBits[a.(string)] - capBits[b.(string)] })
	return all
}

func TestClamp(t *testing.T) {
	config := map[string]any{
		"ociVersion": "1.0.2-dev",
		"process": map[string]any{
			"user": map[string]any{"uid": 0, "gid": 0, "additionalGids": []any{65534}},
			"args": []any{"/pause"},
			"capabilities": map[string]any{
				"bounding": allCaps(), "effective": allCaps(), "permitted": allCaps(),
				"inheritable": []any{"CAP_SYS_RESOURCE"},
			},
			"rlimits":         []any{map[string]any{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576}},
			"oomScoreAdj":     -998,
			"noNewPrivileges": false,
		},
		"linux": map[string]any{"resources": map[string]any{"memory": map[string]any{"limit": 9007199254740993}}},
	}
	doc, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	out, removed, err := clamp(doc, []string{"process", "capabilities"}, machine)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(removed, []string{"CAP_SYS_RESOURCE"}) {
		t.Errorf("removed %q, want [CAP_SYS_RESOURCE]", removed)
	}
	var got map[string]any
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	caps := got["process"].(map[string]any)["capabilities"].(map[string]any)
	for _, set := range []string{"bounding", "effective", "permitted"} {
		list := caps[set].([]any)
		if len(list) != len(capBits)-1 || slices.Contains(list, any("CAP_SYS_RESOURCE")) {
			t.Errorf("%s: %d capabilities %v, want all %d but CAP_SYS_RESOURCE", set, len(list), list, len(capBits)-1)
		}
	}
	if inh, ok := caps["inheritable"].([]any); !ok || len(inh) != 0 {
		t.Errorf("inheritable = %#v, want an empty list", caps["inheritable"])
	}
	if _, ok := caps["ambient"]; ok {
		t.Error("ambient appeared: a set that was absent must stay absent")
	}
	// Everything else as it was, a number beyond float64's precision too
	// (json.Number in both).
	delete(config["process"].(map[string]any), "capabilities")
	delete(got["process"].(map[string]any), "capabilities")
	want, _ := json.Marshal(config)
	rest, _ := json.Marshal(got)
	if string(rest) != string(want) {
		t.Errorf("the rest of the document changed:\n%s\nwant\n%s", rest, want)
	}
}

func TestClampUnchanged(t *testing.T) {
	for _, tt := range []struct {
		name, doc string
		path      []string
	}{
		{"nothing withheld asked", `{"capabilities":{"bounding":["CAP_NET_ADMIN","CAP_NET_RAW"]}}`, []string{"capabilities"}},
		{"no capabilities", `{"args":["sh"]}`, []string{"capabilities"}},
		{"no process", `{"ociVersion":"1.0.2"}`, []string{"process", "capabilities"}},
		{"process not an object", `{"process":"x"}`, []string{"process", "capabilities"}},
	} {
		out, removed, err := clamp([]byte(tt.doc), tt.path, machine)
		if err != nil || out != nil || removed != nil {
			t.Errorf("%s: clamp = %s, %v, %v; want no change", tt.name, out, removed, err)
		}
	}
	if _, _, err := clamp([]byte(`{"capabilities":`), []string{"capabilities"}, machine); err == nil {
		t.Error("clamp of broken JSON: want an error")
	}
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want invocation
	}{
		// containerd's shim (go-runc) for a pod's container.
		{[]string{"--root", "/run/containerd/runc/k8s.io", "--log", "/run/x/log.json", "--log-format", "json",
			"create", "--bundle", "/run/x/bundle", "--pid-file", "/run/x/init.pid", "abc"},
			invocation{command: "create", file: "/run/x/bundle/config.json", capsAt: []string{"process", "capabilities"}}},
		{[]string{"--root=/r", "--debug", "run", "-b", "/b", "-d", "id"},
			invocation{command: "run", file: "/b/config.json", capsAt: []string{"process", "capabilities"}, debug: true}},
		{[]string{"-root", "/r", "create", "--bundle=/b2", "id"},
			invocation{command: "create", file: "/b2/config.json", capsAt: []string{"process", "capabilities"}}},
		{[]string{"create", "--pid-file", "p", "id"},
			invocation{command: "create", file: "config.json", capsAt: []string{"process", "capabilities"}}},
		{[]string{"--root", "/r", "--log-format", "json", "exec", "--process", "/tmp/runc-process1", "--detach", "id"},
			invocation{command: "exec", file: "/tmp/runc-process1", capsAt: []string{"capabilities"}}},
		{[]string{"exec", "-p=/tmp/p", "id"}, invocation{command: "exec", file: "/tmp/p", capsAt: []string{"capabilities"}}},
		{[]string{"exec", "-t", "id", "sh"}, invocation{command: "exec", capsAt: []string{"capabilities"}}},
		{[]string{"--root", "/r", "delete", "--force", "id"}, invocation{command: "delete"}},
		{[]string{"--version"}, invocation{}},
		{[]string{"--root", "create"}, invocation{}}, // "create" is --root's value
	} {
		if got := parse(tt.args); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parse(%q) = %+v, want %+v", tt.args, got, tt.want)
		}
	}
}

// TestClampFile rewrites a file in place, keeping its mode, and leaves a
// file with nothing to remove untouched.
func TestClampFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "process.json")
	if err := os.WriteFile(f, []byte(`{"args":["sh"],"capabilities":{"effective":["CAP_SYS_RESOURCE","CAP_KILL"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := clampFile(f, []string{"capabilities"}, machine)
	if err != nil || !reflect.DeepEqual(removed, []string{"CAP_SYS_RESOURCE"}) {
		t.Fatalf("clampFile = %v, %v", removed, err)
	}
	b, _ := os.ReadFile(f)
	if string(b) != `{"args":["sh"],"capabilities":{"effective":["CAP_KILL"]}}` {
		t.Errorf("rewritten: %s", b)
	}
	if fi, _ := os.Stat(f); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode())
	}
	before, _ := os.Stat(f)
	if removed, err := clampFile(f, []string{"capabilities"}, machine); err != nil || removed != nil {
		t.Errorf("second clampFile = %v, %v; want nothing to do", removed, err)
	}
	if after, _ := os.Stat(f); !os.SameFile(before, after) {
		t.Error("a file with nothing to remove was replaced")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left beside it: %v", entries)
	}
}
