package userspace

import (
	"fmt"
	"strconv"
	"strings"
)

// PortRange is an inclusive range of ports for the listeners, kube-proxy's
// --proxy-port-range. The zero value means "let the kernel choose".
type PortRange struct {
	Min, Max uint16
}

// ParsePortRange parses "30000-30100" (or a single port). The empty string is
// the zero PortRange.
func ParsePortRange(s string) (PortRange, error) {
	if s == "" {
		return PortRange{}, nil
	}
	lo, hi, found := strings.Cut(s, "-")
	if !found {
		hi = lo
	}
	min, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	max, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	if err1 != nil || err2 != nil || min == 0 || max < min {
		return PortRange{}, fmt.Errorf("port range %q: want MIN-MAX with 0 < MIN <= MAX <= 65535", s)
	}
	return PortRange{Min: uint16(min), Max: uint16(max)}, nil
}

// IsZero reports whether r is the zero PortRange.
func (r PortRange) IsZero() bool { return r == PortRange{} }

// Size is the number of ports in r.
func (r PortRange) Size() int {
	if r.IsZero() {
		return 0
	}
	return int(r.Max) - int(r.Min) + 1
}

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }
