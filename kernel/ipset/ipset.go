package ipset

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Set types svcproxy uses (ipset(8), "SET TYPES"). Members are written as ipset
// prints them.
const (
	// HashIP members are addresses: "198.18.0.10".
	HashIP = "hash:ip"
	// HashIPPort members are address,protocol:port: "198.18.0.10,tcp:80".
	HashIPPort = "hash:ip,port"
	// HashIPPortIP members are address,protocol:port,address:
	// "198.19.1.2,tcp:8080,198.19.1.2".
	HashIPPortIP = "hash:ip,port,ip"
)

// Families of a set.
const (
	Inet  = "inet"
	Inet6 = "inet6"
)

// maxNameLen is IPSET_MAXNAMELEN - 1 (include/uapi/linux/netfilter/ipset/ip_set.h).
const maxNameLen = 31

// Set is one IP set.
type Set struct {
	Name    string
	Type    string // HashIP, HashIPPort or HashIPPortIP
	Family  string // Inet or Inet6
	Members []string
}

// Interface is the IP sets of one network namespace. Implementations are safe for
// concurrent use.
type Interface interface {
	// Restore runs script as `ipset restore` does: one command a line (create, add,
	// del, flush, swap, destroy), in order, stopping at the first that fails. Lines
	// before it may or may not be applied (ipset sends them to the kernel in batches):
	// write scripts that are correct when run again from the start.
	Restore(ctx context.Context, script []byte) error
	// List returns every set with its members, as `ipset save` shows them.
	List(ctx context.Context) ([]Set, error)
}

// ReplaceScript renders the commands that make each set exist with exactly its
// members, atomically for anyone matching it: the members go into a temporary set
// ("NAME-" suffixed by "tmp"), which is then swapped with the real one and destroyed.
// A rule that matches the set sees the old members or the new, never a half.
func ReplaceScript(sets ...Set) []byte {
	var b bytes.Buffer
	for _, s := range sets {
		tmp := TempName(s.Name)
		fmt.Fprintf(&b, "create %s %s family %s -exist\n", s.Name, s.Type, s.Family)
		fmt.Fprintf(&b, "create %s %s family %s -exist\n", tmp, s.Type, s.Family)
		fmt.Fprintf(&b, "flush %s\n", tmp)
		members := slices.Clone(s.Members)
		slices.Sort(members)
		for _, m := range members {
			fmt.Fprintf(&b, "add %s %s -exist\n", tmp, m)
		}
		fmt.Fprintf(&b, "swap %s %s\n", tmp, s.Name)
		fmt.Fprintf(&b, "destroy %s\n", tmp)
	}
	return b.Bytes()
}

// TempName is the temporary set ReplaceScript fills before the swap.
func TempName(name string) string {
	if len(name) > maxNameLen-4 {
		name = name[:maxNameLen-4]
	}
	return name + "-tmp"
}

// DestroyScript renders the commands that destroy the named sets. A set that an
// iptables rule still references cannot be destroyed: delete the rules first.
func DestroyScript(names ...string) []byte {
	var b bytes.Buffer
	for _, n := range names {
		fmt.Fprintf(&b, "destroy %s\n", n)
	}
	return b.Bytes()
}

// IPPort is the hash:ip,port member for an address, a protocol and a port:
// "198.18.0.10,tcp:80" (IPv6 addresses are written bare, as ipset prints them).
func IPPort(ip netip.Addr, proto string, port uint16) string {
	return ip.String() + "," + strings.ToLower(proto) + ":" + strconv.Itoa(int(port))
}

// IPPortIP is the hash:ip,port,ip member: "198.19.1.2,tcp:8080,198.19.1.2".
func IPPortIP(ip netip.Addr, proto string, port uint16, ip2 netip.Addr) string {
	return IPPort(ip, proto, port) + "," + ip2.String()
}

// validName checks a set name as ipset does.
func validName(name string) error {
	if name == "" || len(name) > maxNameLen || strings.ContainsAny(name, " \t\n") {
		return fmt.Errorf("ipset %q: name: want 1 to %d characters without spaces", name, maxNameLen)
	}
	return nil
}

// dimensions is the number of comma-separated parts of a member, per type.
var dimensions = map[string]int{HashIP: 1, HashIPPort: 2, HashIPPortIP: 3}

// normalMember checks member against the set's type and family and returns it in
// the form ipset prints: ports with their protocol ("80" is "tcp:80").
func normalMember(s *Set, member string) (string, error) {
	parts := strings.Split(member, ",")
	if len(parts) != dimensions[s.Type] {
		return "", fmt.Errorf("ipset %s: member %q: want %d parts for %s", s.Name, member, dimensions[s.Type], s.Type)
	}
	for i, p := range parts {
		if i%2 == 1 { // a port
			proto, port, ok := strings.Cut(p, ":")
			if !ok {
				proto, port = "tcp", p
			}
			n, err := strconv.ParseUint(port, 10, 16)
			if err != nil || (proto != "tcp" && proto != "udp" && proto != "sctp") {
				return "", fmt.Errorf("ipset %s: member %q: port %q: want tcp|udp|sctp:PORT", s.Name, member, p)
			}
			parts[i] = proto + ":" + strconv.FormatUint(n, 10)
			continue
		}
		a, err := netip.ParseAddr(p)
		if err != nil || a.Zone() != "" || a.Is4() != (s.Family == Inet) {
			return "", fmt.Errorf("ipset %s: member %q: address %q: not an %s address", s.Name, member, p, s.Family)
		}
		parts[i] = a.String()
	}
	return strings.Join(parts, ","), nil
}
