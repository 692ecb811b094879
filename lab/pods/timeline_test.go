package pods

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A promotion as the timeline shows it: the pods see the node while
// svcproxy proxies in userspace, then the client once the kernel DNATs.
func TestTimeline(t *testing.T) {
	tl := &Timeline{Sender: netip.MustParseAddr("198.19.1.2"), Node: netip.MustParseAddr("198.19.0.1")}
	for i, ev := range []Event{
		{Addr: "198.18.0.20:80"},
		{Pod: "web-0", From: "198.19.0.1:40001", At: 0.2},
		{Pod: "web-1", From: "198.19.0.1:40002", At: 0.7},
		{Pod: "web-2", From: "198.19.0.1:40003", At: 1.1},
		{Pod: "web-0", From: "198.19.1.2:40004", At: 1.6},
		{Err: "connection refused", At: 2.5},
		{Pod: "web-1", From: "198.19.1.2:40005", At: 2.9},
	} {
		if ev.Addr == "" {
			ev.Seq = i
		}
		tl.Add(ev)
	}
	var b strings.Builder
	require.NoError(t, tl.Write(&b))
	t.Logf("svclab traffic --timeline:\n%s", b.String())
	require.Equal(t, `  SECOND  USERSPACE  KERNEL  FAILED
       0          2       0       0  uu
       1          1       1       0  uk
       2          0       1       1  kx
USERSPACE: the pod saw the node (198.19.0.1), svcproxy's own connection; KERNEL: the pod
saw the sender (198.19.1.2), a DNAT or an IPVS virtual server.
`, b.String())
}

func TestTimelineBarScales(t *testing.T) {
	require.Equal(t, strings.Repeat("u", 50)+strings.Repeat("k", 10), timelineBar(TimelineSecond{Userspace: 100, Kernel: 20}))
}
