package userspace

import "sync/atomic"

// Counters are the traffic figures of one service port since the Proxier started
// serving it. For TCP a connection is one accepted client connection; for UDP it
// is one session (one client address, until it has been idle for
// Config.UDPIdleTimeout).
//
// Bytes are added as they are passed on: per UDP datagram, and per TCP read
// (or per splice of what was queued, in a bulk transfer).
type Counters struct {
	ConnectionsOpened uint64 `json:"connectionsOpened"`
	ConnectionsActive uint64 `json:"connectionsActive"`
	BytesFromClients  uint64 `json:"bytesFromClients"` // client -> endpoint
	BytesToClients    uint64 `json:"bytesToClients"`   // endpoint -> client
	// DialFailures counts endpoints that could not be reached: each failed
	// attempt of a connection, whether or not a later endpoint answered.
	DialFailures uint64 `json:"dialFailures"`
}

// counters is the live, lock-free form of Counters.
type counters struct {
	opened, active atomic.Int64
	fromClients    atomic.Uint64
	toClients      atomic.Uint64
	dialFailures   atomic.Uint64
}

func (c *counters) snapshot() Counters {
	return Counters{
		ConnectionsOpened: uint64(c.opened.Load()),
		ConnectionsActive: uint64(max(c.active.Load(), 0)),
		BytesFromClients:  c.fromClients.Load(),
		BytesToClients:    c.toClients.Load(),
		DialFailures:      c.dialFailures.Load(),
	}
}

func (c *counters) connOpened() {
	c.opened.Add(1)
	c.active.Add(1)
}

func (c *counters) connClosed() { c.active.Add(-1) }
