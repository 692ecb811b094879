package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// capBits maps the OCI runtime spec's capability names to their bits
// (linux/capability.h).
var capBits = map[string]int{
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE,
	"CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH, "CAP_FOWNER": unix.CAP_FOWNER,
	"CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_SETGID": unix.CAP_SETGID,
	"CAP_SETUID": unix.CAP_SETUID, "CAP_SETPCAP": unix.CAP_SETPCAP,
	"CAP_LINUX_IMMUTABLE": unix.CAP_LINUX_IMMUTABLE, "CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE,
	"CAP_NET_BROADCAST": unix.CAP_NET_BROADCAST, "CAP_NET_ADMIN": unix.CAP_NET_ADMIN,
	"CAP_NET_RAW": unix.CAP_NET_RAW, "CAP_IPC_LOCK": unix.CAP_IPC_LOCK, "CAP_IPC_OWNER": unix.CAP_IPC_OWNER,
	"CAP_SYS_MODULE": unix.CAP_SYS_MODULE, "CAP_SYS_RAWIO": unix.CAP_SYS_RAWIO,
	"CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT, "CAP_SYS_PTRACE": unix.CAP_SYS_PTRACE,
	"CAP_SYS_PACCT": unix.CAP_SYS_PACCT, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN, "CAP_SYS_BOOT": unix.CAP_SYS_BOOT,
	"CAP_SYS_NICE": unix.CAP_SYS_NICE, "CAP_SYS_RESOURCE": unix.CAP_SYS_RESOURCE,
	"CAP_SYS_TIME": unix.CAP_SYS_TIME, "CAP_SYS_TTY_CONFIG": unix.CAP_SYS_TTY_CONFIG,
	"CAP_MKNOD": unix.CAP_MKNOD, "CAP_LEASE": unix.CAP_LEASE, "CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE,
	"CAP_AUDIT_CONTROL": unix.CAP_AUDIT_CONTROL, "CAP_SETFCAP": unix.CAP_SETFCAP,
	"CAP_MAC_OVERRIDE": unix.CAP_MAC_OVERRIDE, "CAP_MAC_ADMIN": unix.CAP_MAC_ADMIN,
	"CAP_SYSLOG": unix.CAP_SYSLOG, "CAP_WAKE_ALARM": unix.CAP_WAKE_ALARM,
	"CAP_BLOCK_SUSPEND": unix.CAP_BLOCK_SUSPEND, "CAP_AUDIT_READ": unix.CAP_AUDIT_READ,
	"CAP_PERFMON": unix.CAP_PERFMON, "CAP_BPF": unix.CAP_BPF,
	"CAP_CHECKPOINT_RESTORE": unix.CAP_CHECKPOINT_RESTORE,
}

// bounding is a capability bounding set, bit n for capability n.
type bounding uint64

// parseBounding reads CapBnd out of a /proc/PID/status.
func parseBounding(status []byte) (bounding, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("CapBnd %q: %w", strings.TrimSpace(v), err)
			}
			return bounding(n), nil
		}
	}
	return 0, fmt.Errorf("no CapBnd line")
}

// allows reports whether a process bounded by b can hold the capability: a
// name this table does not know is left to runc, which ignores names it
// does not know either.
func (b bounding) allows(name string) bool {
	bit, ok := capBits[strings.ToUpper(name)]
	return !ok || b&(1<<bit) != 0
}

// capSets are the sets of an OCI process's capabilities object.
var capSets = []string{"bounding", "effective", "inheritable", "permitted", "ambient"}

// clamp removes the capabilities b does not allow from the capabilities
// object at path (["process", "capabilities"] in a bundle's config.json,
// ["capabilities"] in runc exec's process file) of the JSON document doc.
// It returns the document to write, or nil when nothing was removed, and
// the names removed, each once. Every other field is kept as it was, numbers
// included; the order of an object's keys is not (json.Marshal sorts them),
// which runc does not mind. A document without capabilities at path is left
// as it is.
func clamp(doc []byte, path []string, b bounding) ([]byte, []string, error) {
	var root any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber() // uids, gids and limits come back as they were written
	if err := dec.Decode(&root); err != nil {
		return nil, nil, err
	}
	obj, ok := root.(map[string]any)
	for _, key := range path {
		if !ok {
			return nil, nil, nil
		}
		obj, ok = obj[key].(map[string]any)
	}
	if !ok {
		return nil, nil, nil
	}
	var removed []string
	for _, set := range capSets {
		list, ok := obj[set].([]any)
		if !ok {
			continue
		}
		kept := list[:0:0]
		for _, c := range list {
			name, ok := c.(string)
			if ok && !b.allows(name) {
				if !slices.Contains(removed, name) {
					removed = append(removed, name)
				}
				continue
			}
			kept = append(kept, c)
		}
		obj[set] = kept
	}
	if len(removed) == 0 {
		return nil, nil, nil
	}
	out, err := json.Marshal(root)
	return out, removed, err
}
