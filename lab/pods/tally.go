package pods

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sort"
	"strings"
	"text/tabwriter"
)

// Tally counts a probe's answers: how many each pod gave, and from which
// addresses the pods saw the requests come.
type Tally struct {
	Target string // as given
	Addr   string // what it resolved to
	Total  int    // requests sent
	Failed int
	// Errors are the distinct error texts, in order of first appearance.
	Errors []string
	Pods   []PodCount // by pod name
}

// PodCount is one pod's share of the answers.
type PodCount struct {
	Pod     string
	Answers int
	// Sources are the client IPs the pod saw (ports dropped), sorted.
	Sources []netip.Addr
}

// Add counts one event of a probe. The address line sets Addr.
func (t *Tally) Add(ev Event) {
	if ev.Seq == 0 {
		if ev.Addr != "" {
			t.Addr = ev.Addr
		}
		return
	}
	t.Total++
	if ev.Err != "" {
		t.Failed++
		for _, e := range t.Errors {
			if e == ev.Err {
				return
			}
		}
		t.Errors = append(t.Errors, ev.Err)
		return
	}
	i := sort.Search(len(t.Pods), func(i int) bool { return t.Pods[i].Pod >= ev.Pod })
	if i == len(t.Pods) || t.Pods[i].Pod != ev.Pod {
		t.Pods = append(t.Pods, PodCount{})
		copy(t.Pods[i+1:], t.Pods[i:])
		t.Pods[i] = PodCount{Pod: ev.Pod}
	}
	pc := &t.Pods[i]
	pc.Answers++
	if host, _, err := net.SplitHostPort(ev.From); err == nil {
		if ip, err := netip.ParseAddr(host); err == nil {
			j := sort.Search(len(pc.Sources), func(j int) bool { return !pc.Sources[j].Less(ip) })
			if j == len(pc.Sources) || pc.Sources[j] != ip {
				pc.Sources = append(pc.Sources, netip.Addr{})
				copy(pc.Sources[j+1:], pc.Sources[j:])
				pc.Sources[j] = ip
			}
		}
	}
}

// Answered is how many requests got an answer.
func (t *Tally) Answered() int { return t.Total - t.Failed }

// Sources are every client address any pod saw, sorted.
func (t *Tally) Sources() []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, p := range t.Pods {
		for _, s := range p.Sources {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// WriteTable writes one row per pod: its answers, its share, and the client
// addresses it saw, each named when names knows it ("198.19.0.1 (node)").
func (t *Tally) WriteTable(w io.Writer, names map[netip.Addr]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tANSWERS\tSHARE\tCLIENT ADDRESS THE POD SAW")
	for _, p := range t.Pods {
		var srcs []string
		for _, s := range p.Sources {
			if n, ok := names[s]; ok {
				srcs = append(srcs, fmt.Sprintf("%s (%s)", s, n))
			} else {
				srcs = append(srcs, s.String())
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", p.Pod, p.Answers, percent(p.Answers, t.Total), strings.Join(srcs, ", "))
	}
	if t.Failed > 0 {
		fmt.Fprintf(tw, "(failed)\t%d\t%s\t%s\n", t.Failed, percent(t.Failed, t.Total), strings.Join(t.Errors, "; "))
	}
	return tw.Flush()
}

func percent(n, total int) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%d%%", (n*100+total/2)/total)
}

// WriteChart writes a horizontal bar per pod, the longest width characters
// wide.
func (t *Tally) WriteChart(w io.Writer, width int) error {
	most, nameW := 0, 0
	for _, p := range t.Pods {
		most = max(most, p.Answers)
		nameW = max(nameW, len(p.Pod))
	}
	if t.Failed > 0 {
		most = max(most, t.Failed)
		nameW = max(nameW, len("(failed)"))
	}
	row := func(name string, n int) error {
		_, err := fmt.Fprintf(w, "%-*s %s %d\n", nameW, name, bar(n, most, width), n)
		return err
	}
	for _, p := range t.Pods {
		if err := row(p.Pod, p.Answers); err != nil {
			return err
		}
	}
	if t.Failed > 0 {
		return row("(failed)", t.Failed)
	}
	return nil
}

// bar is n/most of width block characters; any n > 0 shows at least one.
func bar(n, most, width int) string {
	if most == 0 || n <= 0 {
		return ""
	}
	k := (n*width + most/2) / most
	return strings.Repeat("█", max(k, 1))
}

// Progress is a one-line progress bar: "[#######.....]  12/30".
func Progress(done, total, width int) string {
	if total <= 0 {
		return ""
	}
	k := done * width / total
	return fmt.Sprintf("[%s%s] %*d/%d", strings.Repeat("#", k), strings.Repeat(".", width-k), len(fmt.Sprint(total)), done, total)
}
