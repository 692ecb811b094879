package kubeproxyconfig

import (
	"bufio"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/kube-proxy/config/v1alpha1"
)

// paths lists the JSON paths of every field of t, depth first in the
// type's order: into nested and inlined structs, not into a type that
// decodes itself (a duration, a quantity).
func paths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		ft := f.Type
		inline := name == "" && f.Anonymous
		if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(unmarshalerType) {
			p := prefix
			if !inline {
				p = prefix + name + "."
			}
			out = append(out, paths(ft, p)...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

// Fields, and docs/operations.md's table, list every field of the Go type,
// in its order, each once; the table says of each what Fields says.
func TestFields(t *testing.T) {
	want := paths(reflect.TypeFor[v1alpha1.KubeProxyConfiguration](), "")
	if len(want) < 60 {
		t.Fatalf("only %d fields found by reflection: %q", len(want), want)
	}
	var got []string
	for _, f := range Fields {
		got = append(got, f.Path)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Fields:\n%q\nthe Go type's fields:\n%q", got, want)
	}

	rows := docRows(t)
	var documented []string
	for _, r := range rows {
		documented = append(documented, r[0])
	}
	if !slices.Equal(documented, want) {
		t.Errorf("docs/operations.md's table lists:\n%q\nthe Go type's fields:\n%q", documented, want)
	}
	for i, r := range rows {
		if i < len(Fields) && !strings.HasPrefix(r[1], Fields[i].Use.String()+":") && !strings.HasPrefix(r[1], Fields[i].Use.String()+" ") {
			t.Errorf("docs/operations.md: %s: %q, want it to start with %q", r[0], r[1], Fields[i].Use)
		}
	}
}

// docRows are the rows of the table under "### kube-proxy's configuration
// file": field (without its backquotes), what svcproxy does.
func docRows(t *testing.T) [][2]string {
	t.Helper()
	f, err := os.Open("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows [][2]string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "### "):
			in = line == "### kube-proxy's configuration file"
		case in && strings.HasPrefix(line, "| `"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			rows = append(rows, [2]string{strings.Trim(strings.TrimSpace(cells[0]), "`"), strings.TrimSpace(strings.Join(cells[1:], "|"))})
		}
	}
	if len(rows) == 0 {
		t.Fatal(`docs/operations.md: no table under "### kube-proxy's configuration file"`)
	}
	return rows
}
