package topology

import (
	"os"
	"strconv"
	"time"
)

// SlowdownEnv names the environment variable that multiplies the lab's
// timeouts (the demo's steps, the wait for a process to serve, one request of
// `svclab traffic`): a whole number, 1 when unset. The lab in the VM of `make
// lab-ipvs` runs on an emulated CPU, several times slower than the machine,
// and sets it; svclab's own children (pods, probes) inherit it.
const SlowdownEnv = "SVCLAB_SLOWDOWN"

// Patient is d times the slowdown.
func Patient(d time.Duration) time.Duration {
	n, err := strconv.Atoi(os.Getenv(SlowdownEnv))
	if err != nil || n < 1 {
		return d
	}
	return d * time.Duration(n)
}
