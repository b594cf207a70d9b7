// The endpoint's own NIC ports, one a plane. Planes can differ: a port of
// 50 Gb/s beside ports of 100 (docs/cc.md, "Paths and planes").

package engine

import (
	"time"

	"github.com/mroce/mroce/clock"
)

// portBacklog is how many full packets may wait at a port before new data
// goes to another plane. A few absorb the jitter between connections'
// pacers; more would only lengthen the queue that every packet of the
// plane waits in.
const portBacklog = 4

// nicPorts follows what each of the endpoint's ports has been given to send
// and when it will have sent it, at its rate. New data goes on a plane only
// while its port is within portBacklog packets of sending everything. So
// the connections together give each port what it can send, and a slower
// port does not build a queue that its plane's packets, and the end of
// every transfer, wait in.
type nicPorts struct {
	rate  []float64    // bytes of payload a second, by plane
	free  []clock.Time // when each port will have sent what it was given
	slack []time.Duration
}

// newNICPorts returns the ports of the given rates, or nil without any.
func newNICPorts(rates []float64, maxPayload int) *nicPorts {
	if len(rates) == 0 {
		return nil
	}
	n := &nicPorts{rate: rates, free: make([]clock.Time, len(rates)), slack: make([]time.Duration, len(rates))}
	for i, r := range rates {
		n.slack[i] = time.Duration(float64(portBacklog*maxPayload) / r * 1e9)
	}
	return n
}

// ready reports whether plane's port can take new data at now. A plane the
// endpoint has no rate for is always ready.
func (n *nicPorts) ready(plane int, now clock.Time) bool {
	return n == nil || plane >= len(n.free) || n.free[plane].Sub(now) <= n.slack[plane]
}

// readyAt returns when plane's port can take new data again.
func (n *nicPorts) readyAt(plane int) clock.Time {
	return n.free[plane].Add(-n.slack[plane])
}

// sent charges bytes of payload sent at now to plane's port. Resends and
// copies are charged too: they take the port's time like new data.
func (n *nicPorts) sent(plane, bytes int, now clock.Time) {
	if n == nil || plane >= len(n.free) {
		return
	}
	n.free[plane] = max(n.free[plane], now).Add(time.Duration(float64(bytes) / n.rate[plane] * 1e9))
}
