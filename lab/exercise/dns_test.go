package exercise

import (
	"os"
	"strings"
	"testing"
)

// dnsLab resolves as a resolver with ndots would, logging its questions
// as clusterdns does; web resolves unless noWeb.
func dnsLab(t *testing.T, ndots int, noWeb bool) kernelLab {
	k := kernelLab{fakeLab: lab("userspace", "ready", "userspace"), logDir: t.TempDir(),
		out: map[string]string{"client getent ahostsv4 " + complete: "198.18.0.10     STREAM " + complete + "\n"}}
	if !noWeb {
		k.out["client getent ahostsv4 web"] = "198.18.0.20     STREAM web.default.svc.cluster.local\n"
	}
	k.onExec = func(cmd string) {
		if cmd != "client getent ahostsv4 "+complete {
			return
		}
		var log strings.Builder
		if ndots > 4 {
			for _, d := range []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"} {
				log.WriteString("time=x level=INFO msg=query client=198.19.1.2:5000 name=" + complete + "." + d + ". type=A rcode=NXDOMAIN duration=1ms\n")
			}
		}
		log.WriteString("time=x level=INFO msg=query client=198.19.1.2:5000 name=" + complete + ". type=A rcode=NOERROR duration=1ms\n")
		f, err := os.OpenFile(k.LogPath("clusterdns"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(log.String()); err != nil {
			t.Fatal(err)
		}
	}
	// What clusterdns logged before the check: not counted.
	if err := os.WriteFile(k.LogPath("clusterdns"), []byte("time=x level=INFO msg=query client=198.19.1.2:5000 name="+complete+".cluster.local. type=A rcode=NXDOMAIN duration=1ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestOneQuestion(t *testing.T) {
	r := check(t, "06", dnsLab(t, 4, false))
	want(t, "ndots:4", r, true, "")
	if !strings.Contains(r.Saw, "asked 1 question: "+complete+". NOERROR") {
		t.Errorf("ndots:4: %q, want the one question", r.Saw)
	}
	r = check(t, "06", dnsLab(t, 5, false))
	want(t, "ndots:5", r, false, "/etc/netns/svclab-client/resolv.conf")
	if !strings.Contains(r.Saw, "asked 4 questions") {
		t.Errorf("ndots:5: %q, want four questions", r.Saw)
	}
	want(t, "no search list", check(t, "06", dnsLab(t, 1, true)), false, "search line")
}
