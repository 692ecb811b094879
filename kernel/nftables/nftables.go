package nftables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"

	gnftables "github.com/google/nftables"
	"sigs.k8s.io/knftables"
)

// Interface is the nftables boundary, for one table. Real talks to the kernel; Fake
// keeps the table in memory and traces packets through it. Both are knftables
// Interfaces; svcproxy uses only these calls.
type Interface interface {
	// NewTransaction returns an empty transaction for the table.
	NewTransaction() *knftables.Transaction

	// Run applies tx atomically: all of it, or (with an error) nothing.
	Run(ctx context.Context, tx *knftables.Transaction) error

	// RunParts applies a transaction made in parts as one, atomically: each
	// function of parts fills an empty transaction with a part, in order.
	// It returns the number of operations. Real lets each part go once it
	// is written (a full sync need not be held whole); Fake fills one
	// transaction with every part and runs it.
	RunParts(ctx context.Context, parts iter.Seq[func(*knftables.Transaction)]) (int, error)

	// ListAll returns the names of the table's objects by type ("chain", "set",
	// "map", "counter"); an error for which IsNotFound is true when there is no
	// table. This is how a new process finds what an old one left.
	ListAll(ctx context.Context) (map[string][]string, error)

	// CountRules returns how many rules chain holds (0 when there is no such
	// chain); an error for which IsNotFound is true when there is no table.
	// It reads one chain, not the table: how a sync checks, every period, that
	// nobody flushed or deleted the table.
	CountRules(ctx context.Context, chain string) (int, error)

	// ListCounters returns the table's named counters with their packet and byte
	// counts; an error for which IsNotFound is true when there is no table.
	ListCounters(ctx context.Context) ([]*knftables.Counter, error)
}

// netlinkFamily is a table family in google/nftables' terms: svcproxy's tables
// are `ip` (IPv4) or `ip6` (IPv6), one per IP family, as kube-proxy's.
func netlinkFamily(f knftables.Family) gnftables.TableFamily {
	if f == knftables.IPv6Family {
		return gnftables.TableFamilyIPv6
	}
	return gnftables.TableFamilyIPv4
}

// Real is the kernel's nf_tables, in the network namespace of the calling OS
// thread: transactions go to the nft binary (`nft -f -`) with each chain's rules
// in one block (chainBlocks says why), and names and counters are read over
// netlink (google/nftables, through knftables for the names), which reads no
// rules.
type Real struct {
	knftables.Interface // NewTransaction: knftables over the nft binary

	nft     string              // the nft binary
	family  knftables.Family    // ip or ip6
	table   string              // the table's name
	netlink knftables.Interface // ListAll: knftables' netlink listing
	conn    *gnftables.Conn     // whether the table exists
}

var _ Interface = (*Real)(nil)

// New returns a Real Interface for the IPv4 table name (`ip NAME`). It fails,
// saying why, when the nft binary is missing or the kernel has no nf_tables.
func New(table string) (*Real, error) { return NewFamily(knftables.IPv4Family, table) }

// NewFamily returns a Real Interface for the table name of family: `ip NAME` or
// `ip6 NAME`.
func NewFamily(family knftables.Family, table string) (*Real, error) {
	if family != knftables.IPv4Family && family != knftables.IPv6Family {
		return nil, fmt.Errorf("nftables: family %q: want ip or ip6", family)
	}
	nft, err := knftables.New(family, table)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	nl, err := knftables.New(family, table, knftables.UseNetlink)
	if err != nil {
		return nil, fmt.Errorf("nftables: netlink: %w", err)
	}
	conn, err := gnftables.New() // a socket per call, in the calling thread's namespace
	if err != nil {
		return nil, fmt.Errorf("nftables: netlink: %w", err)
	}
	return &Real{Interface: nft, nft: path, family: family, table: table, netlink: nl, conn: conn}, nil
}

// Run implements Interface: one `nft -f -` with the transaction in chain blocks.
func (r *Real) Run(ctx context.Context, tx *knftables.Transaction) error {
	_, err := r.run(ctx, func(yield func(*knftables.Transaction) bool) { yield(tx) })
	return err
}

// RunParts implements Interface: one `nft -f -`, to which each part goes as
// soon as it is made, in chain blocks, and is then let go. nft reads its whole
// input before it sends the kernel anything, and the kernel applies it as one
// batch, so the parts are one transaction as much as one Run is; what it
// saves is memory: a full sync at 10,000 service ports is ~76,000 knftables
// objects and ~7 MB of text when made whole (docs/benchmarks/kubeproxy.md),
// a few hundred kilobytes a part.
func (r *Real) RunParts(ctx context.Context, parts iter.Seq[func(*knftables.Transaction)]) (int, error) {
	return r.run(ctx, func(yield func(*knftables.Transaction) bool) {
		for fill := range parts {
			tx := r.NewTransaction()
			fill(tx)
			if !yield(tx) {
				return
			}
		}
	})
}

// run writes txs to one `nft -f -`, started at the first that has
// operations, and returns their number. A transaction knftables finds
// invalid stops the run: nft is killed before its input ends, so nothing is
// applied, and the error is knftables'.
func (r *Real) run(ctx context.Context, txs iter.Seq[*knftables.Transaction]) (int, error) {
	var (
		nft      *nftRun
		ops      int
		declared = map[string]bool{} // by the transactions written so far: chainBlocks
	)
	for tx := range txs {
		text := tx.String()
		if i := strings.LastIndex(text, "# ERROR: "); i == 0 || (i > 0 && text[i-1] == '\n') {
			if nft != nil {
				nft.abort()
			}
			return ops, r.Interface.Run(ctx, tx) // an invalid transaction: knftables returns its error
		}
		if tx.NumOperations() == 0 {
			continue
		}
		if nft == nil {
			var err error
			if nft, err = r.start(ctx); err != nil {
				return 0, err
			}
		}
		ops += tx.NumOperations()
		writeChainBlocksAfter(nft.in, text, declared)
	}
	if nft == nil {
		return 0, nil
	}
	return ops, nft.wait()
}

// nftRun is an `nft -f -` being fed its input.
type nftRun struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	in     *bufio.Writer
	stderr bytes.Buffer
	cancel context.CancelFunc
}

// start starts `nft -f -` in the calling thread's network namespace.
func (r *Real) start(ctx context.Context) (*nftRun, error) {
	ctx, cancel := context.WithCancel(ctx)
	run := &nftRun{cmd: exec.CommandContext(ctx, r.nft, "-f", "-"), cancel: cancel}
	run.cmd.Env = nftEnv(os.Environ())
	run.cmd.Stderr = &run.stderr
	var err error
	if run.stdin, err = run.cmd.StdinPipe(); err != nil {
		cancel()
		return nil, fmt.Errorf("nft: %w", err)
	}
	if err := run.cmd.Start(); err != nil {
		cancel()
		return nil, newRunError(err, "")
	}
	run.in = bufio.NewWriterSize(run.stdin, 64<<10)
	return run, nil
}

// wait ends nft's input and waits for it to apply it. A write that failed
// (nft ended early) is not the error to report: nft's exit status and
// message are.
func (run *nftRun) wait() error {
	defer run.cancel()
	_ = run.in.Flush()
	_ = run.stdin.Close()
	if err := run.cmd.Wait(); err != nil {
		return newRunError(err, run.stderr.String())
	}
	return nil
}

// abort kills nft before its input has ended, so that it applies nothing.
func (run *nftRun) abort() {
	run.cancel()
	_ = run.cmd.Wait()
}

// hugePages is the glibc tunable that makes nft's malloc ask for transparent huge
// pages (glibc 2.35 and later; older ones and kernels without THP ignore it). A
// full sync at 10,000 service ports makes nft 1.0.6 allocate ~200 MB while it
// parses; with 4 KB pages that is ~50,000 page faults, and the time spent in them
// and in malloc's own bookkeeping was a third of nft's user time
// (docs/benchmarks.md). It changes nothing in what nft sends.
const hugePages = "glibc.malloc.hugetlb=1"

// nftEnv is the environment nft runs with: env, with hugePages added to
// GLIBC_TUNABLES (after any tunables already there).
func nftEnv(env []string) []string {
	out := slices.Clone(env)
	for i, kv := range out {
		v, ok := strings.CutPrefix(kv, "GLIBC_TUNABLES=")
		if !ok {
			continue
		}
		if !strings.Contains(v, "glibc.malloc.hugetlb=") { // the operator's own setting wins
			if v != "" && !strings.HasSuffix(v, ":") {
				v += ":"
			}
			out[i] = "GLIBC_TUNABLES=" + v + hugePages
		}
		return out
	}
	return append(out, "GLIBC_TUNABLES="+hugePages)
}

// ListAll implements Interface over netlink: `nft list table` would print every
// rule of the table (13 s at 10,000 service ports here) to give a few names.
func (r *Real) ListAll(ctx context.Context) (map[string][]string, error) {
	if err := r.tableExists(); err != nil {
		return nil, err
	}
	return r.netlink.ListAll(ctx)
}

// CountRules implements Interface over netlink: a dump of one chain's rules,
// which the kernel filters by name (nft would list the table first).
func (r *Real) CountRules(ctx context.Context, chain string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := r.tableExists(); err != nil {
		return 0, err
	}
	rules, err := r.conn.GetRules(&gnftables.Table{Name: r.table, Family: netlinkFamily(r.family)}, &gnftables.Chain{Name: chain})
	if err != nil {
		return 0, fmt.Errorf("list rules of chain %s: %w", chain, err)
	}
	return len(rules), nil
}

// ListCounters implements Interface over netlink: one dump of the table's
// stateful objects, which the kernel filters by table. knftables'
// ListCounters runs `nft list counters table`, and nft 1.0.6 reads every
// table's rules before it prints a counter, iptables-nft's beside ours
// included: 0.1 CPU s a call beside the 3,000 portal rules of hybrid mode at
// 1,000 Services, which reads its promoted ports' counters every second.
func (r *Real) ListCounters(ctx context.Context) ([]*knftables.Counter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := r.tableExists(); err != nil {
		return nil, err
	}
	objs, err := r.conn.GetObjects(&gnftables.Table{Name: r.table, Family: netlinkFamily(r.family)})
	if err != nil {
		return nil, fmt.Errorf("list counters of table %s %s: %w", r.family, r.table, err)
	}
	var out []*knftables.Counter
	for _, o := range objs {
		if c, ok := o.(*gnftables.CounterObj); ok {
			out = append(out, &knftables.Counter{Name: c.Name, Packets: knftables.PtrTo(c.Packets), Bytes: knftables.PtrTo(c.Bytes)})
		}
	}
	return out, nil
}

// tableExists returns nil if the table exists, an error for which IsNotFound is
// true if it does not.
func (r *Real) tableExists() error {
	tables, err := r.conn.ListTablesOfFamily(netlinkFamily(r.family))
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == r.table {
			return nil
		}
	}
	return &runError{msg: fmt.Sprintf("table %s %s: No such file or directory", r.family, r.table), errno: syscall.ENOENT}
}

// runError is a failed nft run: nft's message, and the errno it names first, as
// knftables reads it (so IsNotFound works for Real's errors as for knftables').
type runError struct {
	msg   string
	errno syscall.Errno
	err   error
}

func newRunError(err error, stderr string) error {
	e := &runError{msg: strings.TrimSpace(stderr), err: err}
	if e.msg == "" {
		e.msg = err.Error()
	}
	first, _, _ := strings.Cut(e.msg, "\n")
	switch {
	case strings.Contains(first, "No such file or directory"):
		e.errno = syscall.ENOENT
	case strings.Contains(first, "File exists"):
		e.errno = syscall.EEXIST
	}
	return e
}

func (e *runError) Error() string { return e.msg }
func (e *runError) Unwrap() error { return e.err }

// Available says why nftables cannot be used here, or nil: the nft binary must be on
// PATH and able to talk to the kernel.
func Available() error {
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("nftables: the nft binary is not installed (Debian package nftables)")
	}
	_, err := knftables.New(knftables.IPv4Family, "svcproxy-probe")
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return nil
}

// IsNotFound reports whether err says that the table (or another object) does not
// exist.
func IsNotFound(err error) bool {
	var re *runError
	if errors.As(err, &re) {
		return re.errno == syscall.ENOENT
	}
	return knftables.IsNotFound(err)
}
