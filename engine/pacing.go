// The sender's pacing: it spaces its packets at the least of the rate its
// windows give, its receiver's hint (spec section 5.5), its share of a
// shared NIC and what its own host lets out (localdrop.go).

package engine

import (
	"math"

	"github.com/mroce/mroce/cc"
)

// onPace is the pacer's wake-up. A wake later than the pacer asked, as an
// event loop on real sockets always is, may make up the time it lost.
func (s *sender) onPace() {
	s.pacer.Late(int64(s.c.ep.clock.Now()), pacerCatchUp)
	s.pump()
	s.pacer.OnTime()
	s.c.ep.flush()
}

// windowsRate is the rate the paths' windows give at their least round
// trips, computed again only when a window, RTT or state changed.
func (s *sender) windowsRate() float64 {
	if s.rateStale {
		s.windowRate, s.rateStale = cc.WindowRate(s.rateIn), false
	}
	return s.windowRate
}

// paced charges a transmission of bytes to the pacer at the sender's rate.
func (s *sender) paced(bytes int) {
	if s.c.ep.cfg.NoPacing {
		return
	}
	now := int64(s.c.ep.clock.Now())
	wr := s.windowsRate()
	rate := cc.Rate(wr, s.hint)
	if m := s.nicShare; m != nil {
		// The endpoint's NIC is shared. This connection asks for what its
		// windows and its receiver allow, leaving out the pacing gain,
		// which only spaces packets. It gets at most its max-min share of
		// the NIC. A connection with nothing more to send leaves its share
		// to the others.
		if s.unsent == 0 {
			m.Leave()
		} else {
			m.ObserveDemand(math.Min(wr, s.hint), bytes, now)
			rate = min(rate, m.Share())
		}
	}
	rate = s.host.limit(now, bytes, rate)
	s.pacer.Sent(now, bytes, rate)
}
