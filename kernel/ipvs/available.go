package ipvs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
)

// procIPVS exists once the ip_vs module is loaded (or built in).
const procIPVS = "/proc/net/ip_vs"

// Available returns nil when the running kernel has IPVS, loading the ip_vs module if
// needed, and otherwise the reason why not, for the one log line of a fallback:
//
//	/proc/net/ip_vs: no such file or directory; kernel has no IPVS (modprobe ip_vs: exit status 1: FATAL: Module ip_vs not found ...)
func Available() error {
	_, statErr := os.Stat(procIPVS)
	if statErr == nil {
		return nil
	}
	out, err := exec.Command("modprobe", "ip_vs").CombinedOutput()
	if err == nil {
		if _, err := os.Stat(procIPVS); err == nil {
			return nil
		}
	}
	why := "loaded but " + procIPVS + " is still missing"
	if err != nil {
		why = err.Error()
		if out = bytes.TrimSpace(out); len(out) > 0 {
			why += ": " + string(out)
		}
	}
	return fmt.Errorf("%w; kernel has no IPVS (modprobe ip_vs: %s)", statErr, why)
}
