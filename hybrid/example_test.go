package hybrid_test

import (
	"fmt"
	"time"

	"github.com/svcproxy/svcproxy/hybrid"
	"github.com/svcproxy/svcproxy/service"
)

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// The Promoter watches each service port's count of new connections, one
// sample a second, and moves a port to the kernel once its rate has held at
// --promote-conn-rate (here 20 per second) for --promote-after (3s), and back
// to userspace once it has stayed below the rate for --demote-after (5s). The
// caller confirms each move with Moved once the rules are in place.
func ExamplePromoter() {
	c := &clock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	p, err := hybrid.NewPromoter(hybrid.PromoterConfig{
		PromoteConnRate: 20,
		PromoteAfter:    3 * time.Second,
		DemoteAfter:     5 * time.Second,
		Clock:           c,
	})
	if err != nil {
		panic(err)
	}
	web := service.PortName{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"}, Port: "http", Protocol: service.TCP}

	// Connections per second: quiet, busy for five seconds, quiet again.
	perSecond := []uint64{2, 3, 30, 40, 35, 30, 30, 1, 0, 0, 0, 0, 0, 0}
	var count uint64 // the cumulative count, as the counters report it
	for second, n := range perSecond {
		moves := p.Observe(map[service.PortName]uint64{web: count})
		for _, m := range moves {
			fmt.Printf("second %2d: %s\n", second, m)
			p.Moved(m.Port, m.To)
		}
		count += n
		c.now = c.now.Add(time.Second)
	}
	fmt.Println("now:", p.Path(web))
	// Output:
	// second  5: default/web:http -> kernel (35.0 conn/s for 3s)
	// second 12: default/web:http -> userspace (0.2 conn/s for 5s)
	// now: userspace
}
