package ipset

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Fake keeps sets in memory and runs restore scripts as ipset does: line by line,
// stopping at the first error with the lines before it applied.
type Fake struct {
	// OnRestore, if not nil, is called after every Restore with every set, so a
	// test can mirror them where rules match them (iptables.Fake.SetIPSet).
	OnRestore func(sets []Set)

	mu       sync.Mutex
	sets     map[string]*Set
	restores int
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake with no sets.
func NewFake() *Fake { return &Fake{sets: map[string]*Set{}} }

// Restores counts the Restore calls: a second sync of the same input should add none.
func (f *Fake) Restores() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restores
}

// Dump prints the sets as `ipset save` does, without the tuning options, sorted.
func (f *Fake) Dump() string {
	sets, _ := f.List(context.Background())
	var b strings.Builder
	for _, s := range sets {
		fmt.Fprintf(&b, "create %s %s family %s\n", s.Name, s.Type, s.Family)
		for _, m := range s.Members {
			fmt.Fprintf(&b, "add %s %s\n", s.Name, m)
		}
	}
	return b.String()
}

// List implements Interface.
func (f *Fake) List(ctx context.Context) ([]Set, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listLocked(), ctx.Err()
}

func (f *Fake) listLocked() []Set {
	out := make([]Set, 0, len(f.sets))
	for _, s := range f.sets {
		c := *s
		c.Members = slices.Clone(s.Members)
		slices.Sort(c.Members)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Restore implements Interface.
func (f *Fake) Restore(ctx context.Context, script []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	f.restores++
	err := f.run(script)
	sets := f.listLocked()
	f.mu.Unlock()
	if f.OnRestore != nil {
		f.OnRestore(sets)
	}
	return err
}

func (f *Fake) run(script []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(script))
	for n := 1; sc.Scan(); n++ {
		w := strings.Fields(sc.Text())
		if len(w) == 0 || strings.HasPrefix(w[0], "#") {
			continue
		}
		exist := false
		if w[len(w)-1] == "-exist" {
			exist, w = true, w[:len(w)-1]
		}
		if err := f.command(w, exist); err != nil {
			return fmt.Errorf("fake ipset restore: line %d %q: %w", n, sc.Text(), err)
		}
	}
	return sc.Err()
}

func (f *Fake) command(w []string, exist bool) error {
	args := func(n int) error {
		if len(w) != n+1 {
			return fmt.Errorf("%s: want %d arguments", w[0], n)
		}
		return nil
	}
	lookup := func(name string) (*Set, error) {
		s, ok := f.sets[name]
		if !ok {
			return nil, fmt.Errorf("set %s does not exist", name)
		}
		return s, nil
	}
	switch w[0] {
	case "create":
		return f.create(w[1:], exist)
	case "add", "del":
		if err := args(2); err != nil {
			return err
		}
		s, err := lookup(w[1])
		if err != nil {
			return err
		}
		m, err := normalMember(s, w[2])
		if err != nil {
			return err
		}
		i := slices.Index(s.Members, m)
		switch {
		case w[0] == "add" && i < 0:
			s.Members = append(s.Members, m)
		case w[0] == "add" && !exist:
			return fmt.Errorf("element %s is already in set %s", m, s.Name)
		case w[0] == "del" && i >= 0:
			s.Members = slices.Delete(s.Members, i, i+1)
		case w[0] == "del" && !exist:
			return fmt.Errorf("element %s is not in set %s", m, s.Name)
		}
	case "flush":
		if err := args(1); err != nil {
			return err
		}
		s, err := lookup(w[1])
		if err != nil {
			return err
		}
		s.Members = nil
	case "swap":
		if err := args(2); err != nil {
			return err
		}
		a, err := lookup(w[1])
		if err != nil {
			return err
		}
		b, err := lookup(w[2])
		if err != nil {
			return err
		}
		if a.Type != b.Type || a.Family != b.Family {
			return fmt.Errorf("sets %s and %s: types or families differ", a.Name, b.Name)
		}
		a.Members, b.Members = b.Members, a.Members
	case "destroy":
		if err := args(1); err != nil {
			return err
		}
		if _, err := lookup(w[1]); err != nil {
			return err
		}
		delete(f.sets, w[1])
	default:
		return fmt.Errorf("unknown command %q", w[0])
	}
	return nil
}

// create handles "create NAME TYPE [family inet|inet6] [OPTION VALUE]...".
func (f *Fake) create(w []string, exist bool) error {
	if len(w) < 2 || len(w)%2 != 0 {
		return fmt.Errorf("create: want NAME TYPE [OPTION VALUE]...")
	}
	s := &Set{Name: w[0], Type: w[1], Family: Inet}
	if err := validName(s.Name); err != nil {
		return err
	}
	if _, ok := dimensions[s.Type]; !ok {
		return fmt.Errorf("create %s: type %q: not one of %s, %s, %s", s.Name, s.Type, HashIP, HashIPPort, HashIPPortIP)
	}
	for i := 2; i < len(w); i += 2 {
		switch w[i] {
		case "family":
			if w[i+1] != Inet && w[i+1] != Inet6 {
				return fmt.Errorf("create %s: family %q: want inet or inet6", s.Name, w[i+1])
			}
			s.Family = w[i+1]
		case "hashsize", "maxelem", "timeout", "bucketsize", "initval":
		default:
			return fmt.Errorf("create %s: unknown option %q", s.Name, w[i])
		}
	}
	if old, ok := f.sets[s.Name]; ok {
		if exist && old.Type == s.Type && old.Family == s.Family {
			return nil
		}
		return fmt.Errorf("set %s already exists", s.Name)
	}
	f.sets[s.Name] = s
	return nil
}
