// Package lifecycle is where the node's one socket LB lives and how it
// comes and goes: the cgroup v2 directory its programs attach to, the bpffs
// directory its maps and links are pinned in (so they outlive a restart),
// each checked before anything is loaded, and the removal of what an earlier
// svcproxy pinned. The programs and maps are one per node, not per IP family
// or per mode: the program opens them once (Open) and hands them to both
// families' socket LB paths (offload/socklb), removes them in a mode that
// does not use them (RemoveLeftover) and at --cleanup (Remove).
//
// It belongs under kernel/socklb, not offload/socklb: it knows no Snapshot
// and no dataplane, only the kernel's filesystems (cgroup2, bpffs) and
// kernel/socklb's loader; the kernel rooms import nothing above them, and
// so does it. Its defaults are svcproxy's flags' (--socklb-cgroup,
// --socklb-pin-path), and its errors name those flags: they are what the
// user gave.
package lifecycle
