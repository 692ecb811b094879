package exercise

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// complete is the name the DNS exercise resolves: kube-dns's full name,
// with four dots and no final one.
const complete = "kube-dns.kube-system.svc.cluster.local"

// question is one line of clusterdns's query log (--log-queries).
var question = regexp.MustCompile(`name=(\S+) type=(\S+) rcode=(\S+)`)

// checkOneQuestion resolves kube-dns's full name in the client, as a
// program does (getent, through the C library and the client's
// resolv.conf), and counts the A questions clusterdns logged for it: one
// when the resolver took the name as complete. `web` must still resolve
// by its short name, through the search list.
func checkOneQuestion(ctx context.Context, l KernelLab) (Result, error) {
	logPath := l.LogPath("clusterdns")
	var from int64
	if fi, err := os.Stat(logPath); err == nil {
		from = fi.Size()
	}
	if _, err := output(ctx, l, "client", "getent", "ahostsv4", complete); err != nil {
		return Result{Saw: "the client cannot resolve " + complete + ": " + err.Error(),
			Hint: "keep a nameserver line for kube-dns (198.18.0.10) in the client's resolv.conf"}, nil
	}
	asked, err := questionsFor(ctx, logPath, from, complete+".")
	if err != nil {
		return Result{}, err
	}
	now := fmt.Sprintf("resolving %s, the client asked %d question%s: %s", complete, len(asked), plural(len(asked)), strings.Join(asked, ", "))
	if _, err := output(ctx, l, "client", "getent", "ahostsv4", "web"); err != nil {
		return Result{Saw: now + "; but web no longer resolves",
			Hint: "web is found through the search list (web.default.svc.cluster.local): keep its search line"}, nil
	}
	if len(asked) != 1 {
		return Result{Saw: now,
			Hint: "a name with fewer dots than ndots goes through the search list first. The lab wrote the client's resolver file to /etc/netns/svclab-client/resolv.conf (in the client: /etc/resolv.conf), as a kubelet writes a pod's"}, nil
	}
	return Result{Done: true, Saw: now + "; web still resolves by its short name"}, nil
}

// questionsFor waits for clusterdns to log the answer to name (it logs a
// question after answering it) in its log past offset from, and returns
// the A questions the resolver asked on the way: name itself and name with
// a search domain appended, each with its answer's code.
func questionsFor(ctx context.Context, logPath string, from int64, name string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		b, err := os.ReadFile(logPath)
		if err != nil {
			return nil, err
		}
		if int64(len(b)) < from {
			from = 0 // the log was emptied in between
		}
		var asked []string
		answered := false
		for _, line := range strings.Split(string(b[from:]), "\n") {
			m := question.FindStringSubmatch(line)
			if m == nil || m[2] != "A" || !strings.HasPrefix(m[1], name) {
				continue
			}
			asked = append(asked, m[1]+" "+m[3])
			answered = answered || m[1] == name
		}
		if answered {
			return asked, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: no question for %s logged after resolving it", logPath, name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
