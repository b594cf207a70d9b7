// The start of a connection's windows: from the first window to the
// receiver's share of the bandwidth-delay product in one step (docs/cc.md,
// "The sender: a window per path, a rate per connection").

package engine

import (
	"math"
	"time"

	"github.com/mroce/mroce/clock"
)

// trainPackets is how many packets of the first window must be
// acknowledged after the first ACK before their spacing gives a rate.
const trainPackets = 8

// startFromHint raises the connection's windows, once, to what its
// receiver's share keeps in flight over the shortest round trip seen: the
// rate hint times that RTT, or less where the first window arrived more
// slowly. It does so once trainPackets more packets are acknowledged after
// the first ACK, and not at all once a path saw a CE mark or a queue above
// its delay target (cc.DelayParams), timed out or had a packet dropped by
// the local host (localdrop.go).
//
// The hint knows the receiver's side only. The first window leaves back to
// back, so the spacing of its acknowledgments is the rate of the slowest
// link it crossed, the sender's own host included: a sender behind a slow
// qdisc, or one of N in an incast, measures its own bottleneck. Each path
// keeps its part of the total in proportion to its window, and never goes
// past PathWindow.
//
// The first window is a fixed 16 packets, one bandwidth-delay product at
// 100 Gb/s and a few microseconds. At 400 Gb/s and 12.5 µs a BDP is near
// 150 packets, and windows that grow one packet a round trip take most of
// a transfer to get there. The hint is the receiver's max-min share among
// every sender it sees (spec section 5.5), so N senders to one receiver
// start at a BDP together, not N of them: an incast keeps its queue.
func (s *sender) startFromHint(at clock.Time) {
	if s.started || math.IsInf(s.hint, 1) || s.paths == nil {
		return
	}
	var total float64
	var acked uint64
	var minRTT time.Duration
	for _, p := range s.paths {
		if p.Counters.CEMarks > 0 || p.cwin.QueueSeen() || p.Counters.Timeouts > 0 || p.Counters.LocalDrops > 0 {
			s.started = true // congestion, a fault or the local host spoke first
			return
		}
		acked += p.Counters.Acked
		if !p.InUse() {
			continue
		}
		total += p.cwin.Value()
		if p.RTT.Samples > 0 && (minRTT == 0 || p.RTT.Min < minRTT) {
			minRTT = p.RTT.Min
		}
	}
	switch {
	case acked == 0:
		return
	case s.train.at == 0:
		s.train.at, s.train.acked = at, acked
		return
	case acked < s.train.acked+trainPackets || at == s.train.at || minRTT == 0 || total == 0:
		return // the next ACK tries again
	}
	s.started = true
	delivered := float64(acked-s.train.acked) * s.mss / at.Sub(s.train.at).Seconds()
	target := min(s.hint, delivered) * minRTT.Seconds() / s.mss
	if target <= total {
		return
	}
	for _, p := range s.paths {
		if p.InUse() {
			p.cwin.Raise(p.cwin.Value() * target / total)
			p.windowChanged()
		}
	}
}
