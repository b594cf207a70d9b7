// The endpoint's own NIC ports, one a plane. Planes can differ: a port of
// 50 Gb/s beside ports of 100 (docs/cc.md, "Paths and planes"), or a
// plane whose own queue on the way out lets out less than the others'
// (localdrop.go).

package engine

import (
	"math"
	"slices"
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
// every transfer, wait in. A port's rate is the one configured
// (Config.PortRates), or the one its plane's own queue was found to let
// out (planeQueue), whichever is less; a plane with neither always takes
// new data.
type nicPorts struct {
	rate       []float64       // configured bytes of payload a second, by plane; may be shorter than the planes
	portRate   []float64       // each port's rate now (refresh), +Inf for none
	slack      []time.Duration // how far ahead of now each port's free may be and it still takes new data
	free       []clock.Time    // when each port will have sent what it was given
	queue      []planeQueue    // each plane's own queue on the way out, by plane
	total      uint64          // bytes of payload given to every port, ever
	maxPayload int
}

// newNICPorts returns the ports of the endpoint's planes, at the given
// rates where there are any.
func newNICPorts(planes int, rates []float64, maxPayload int) *nicPorts {
	n := &nicPorts{rate: rates, portRate: make([]float64, planes), slack: make([]time.Duration, planes),
		free: make([]clock.Time, planes), queue: make([]planeQueue, planes), maxPayload: maxPayload}
	for i := range n.queue {
		n.queue[i].host.lift()
		n.refresh(i)
	}
	return n
}

// rated reports whether the endpoint was given its ports' rates.
func (n *nicPorts) rated() bool { return len(n.rate) > 0 }

// refresh sets plane's port's rate to its configured rate or its queue's
// limit, whichever is less, and its slack to portBacklog full packets at
// that rate. It is called whenever the limit changes.
func (n *nicPorts) refresh(plane int) {
	r := n.queue[plane].host.limitRate
	if plane < len(n.rate) {
		r = min(r, n.rate[plane])
	}
	n.portRate[plane] = r
	n.slack[plane] = time.Duration(float64(portBacklog*n.maxPayload) / r * 1e9) // 0 at +Inf
}

// shareRate is the rate plane's paths share new data by (stride): its
// port's configured rate, or the fastest port's for a plane given none.
// The ports are rated (rated).
func (n *nicPorts) shareRate(plane int) float64 {
	if plane < len(n.rate) {
		return n.rate[plane]
	}
	return slices.Max(n.rate)
}

// sameRate reports whether planes a and b share new data at one rate: the
// same shareRate, and neither held lower by its own queue (limited), whose
// port then sends at a rate of its own.
func (n *nicPorts) sameRate(a, b int) bool {
	if a == b {
		return true
	}
	return !n.limited(a) && !n.limited(b) && n.shareRate(a) == n.shareRate(b)
}

// ready reports whether plane's port can take new data at now.
func (n *nicPorts) ready(plane int, now clock.Time) bool {
	return plane >= len(n.free) || math.IsInf(n.portRate[plane], 1) || n.free[plane].Sub(now) <= n.slack[plane]
}

// readyAt returns when plane's port can take new data again.
func (n *nicPorts) readyAt(plane int) clock.Time {
	return n.free[plane].Add(-n.slack[plane])
}

// sent charges bytes of payload sent at now to plane's port. Resends and
// copies are charged too: they take the port's time like new data.
func (n *nicPorts) sent(plane, bytes int, now clock.Time) {
	if plane >= len(n.free) {
		return
	}
	n.total += uint64(bytes)
	q := &n.queue[plane]
	q.sent += uint64(bytes)
	q.host.meter(now, bytes)
	if q.host.limited() && q.host.sendRate >= hostNear*q.host.limitRate {
		// The limit grows only while it holds the plane back: one that
		// grew while the plane sent less would not stop the next burst.
		q.host.grow(now, math.Inf(1))
		n.refresh(plane)
	}
	if r := n.portRate[plane]; !math.IsInf(r, 1) {
		n.free[plane] = max(n.free[plane], now).Add(time.Duration(float64(bytes) / r * 1e9))
	}
}
