// The start of a connection's windows: from the first window to the
// receiver's share of the bandwidth-delay product in one step (docs/cc.md,
// "The sender: a window per path, a rate per connection").

package engine

import (
	"math"
	"time"
)

// startFromHint raises the connection's windows, once, to what its
// receiver's share keeps in flight over the shortest round trip seen: the
// rate hint times that RTT. It does so at the first ACK that brings both a
// hint and an RTT sample, and not at all once a path saw a CE mark or
// timed out. Each path keeps its part of the total in proportion to its
// window, and never goes past PathWindow.
//
// The first window is a fixed 16 packets, one bandwidth-delay product at
// 100 Gb/s and a few microseconds. At 400 Gb/s and 12.5 µs a BDP is near
// 150 packets, and windows that grow one packet a round trip take most of
// a transfer to get there. The hint is the receiver's max-min share among
// every sender it sees (spec section 5.5), so N senders to one receiver
// start at a BDP together, not N of them: an incast keeps its queue.
func (s *sender) startFromHint() {
	if s.started || math.IsInf(s.hint, 1) || s.paths == nil {
		return
	}
	var total float64
	var minRTT time.Duration
	for _, p := range s.paths {
		if p.Counters.CEMarks > 0 || p.Counters.Timeouts > 0 {
			s.started = true // congestion or a fault spoke first
			return
		}
		if !p.InUse() {
			continue
		}
		total += p.cwin.Value()
		if p.RTT.Samples > 0 && (minRTT == 0 || p.RTT.Min < minRTT) {
			minRTT = p.RTT.Min
		}
	}
	if minRTT == 0 || total == 0 {
		return // no sample yet: the next ACK tries again
	}
	s.started = true
	target := s.hint * minRTT.Seconds() / s.mss
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
