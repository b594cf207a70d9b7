// Choosing the path for a packet: new data sprayed over the usable
// paths, by their ports' rates where the endpoint knows them, and kept
// off paths too long for what is left; a resend where Config.Resend says
// (spec section 6.6).

package engine

import (
	"math"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
)

// usable reports whether p can take a packet now. The path must be GOOD, or
// SKIP when skip is set. It needs room in its window and in its ring, where
// refused packets can leave holes behind an unresolved oldest PSN, and a
// window under one packet must have let its gap pass (spaced). And the
// peer's address on its plane must be known.
func (s *sender) usable(p *sendPath, skip bool) bool {
	now := s.c.ep.clock.Now()
	return s.carries(p, now, skip) && p.roomy() && p.spaced(now)
}

// roomy reports whether p has room for a packet in its window and ring.
func (p *sendPath) roomy() bool { return p.held() < p.window && p.ringRoom() }

// spaced reports whether p may send at now for its window: always for a
// window of a packet or more, and for one under a packet once its gap
// after the last packet passed (spacedAt).
func (p *sendPath) spaced(now clock.Time) bool { return p.cwin.Value() >= 1 || now >= p.spacedAt() }

// spacedAt is when p's window next lets it send: a window under one packet
// carries W packets a least round trip (cc.Window.Gap), the RTT the pacing
// rate counts it at. A window of a packet or more, or a path without an
// RTT sample, is not spaced.
func (p *sendPath) spacedAt() clock.Time {
	if p.RTT.Samples == 0 || p.lastSent == 0 {
		return 0
	}
	gap := p.cwin.Gap(p.RTT.Min)
	if gap == 0 {
		return 0
	}
	return p.lastSent.Add(gap)
}

// carries reports whether the path is in service for data: ready (or in
// SKIP, when skip allows it), its peer address known, and not draining to
// move (goTo).
func (s *sender) carries(p *sendPath, now clock.Time, skip bool) bool {
	return p.Ready(now, skip) && s.c.knows(p.Plane()) && !p.returning
}

// pickPath chooses a path for a packet. New data (lost < 0) is sprayed
// round robin over the usable paths whose ports can take it, or by their
// ports' rates, except paths too long for what is left (tailCut). A
// retransmission goes to the usable path with the lowest smoothed RTT
// other than the one that lost it, or back to that one if no other can
// take it; with ResendSamePath, back to that one first; but not to a
// plane whose own queue's limit holds its port back (takesResend).
func (s *sender) pickPath(lost int) *sendPath {
	now := s.c.ep.clock.Now()
	if lost >= 0 && lost < len(s.paths) && s.c.ep.cfg.Resend == ResendSamePath && s.usable(s.paths[lost], true) && s.takesResend(s.paths[lost], now) {
		return s.paths[lost]
	}
	// Paths in SKIP, which saw a CE mark recently, carry less new data:
	// sprayed by their ports' rates, half the turns a clear path on a port
	// of the same rate takes (skipWeight); round robin uses them only when
	// no clear path can take the packet. A resend, too, goes to a SKIP
	// path only when no clear one takes it, but with ResendSamePath.
	var cut time.Duration
	var weighed bool // new data goes by its routes' queues (endInSight)
	if lost < 0 {
		cut = s.tailCut(now)
		weighed = s.c.ep.ports.rated() && s.endInSight()
		if s.c.ep.ports.rated() {
			if skipFirst {
				if p := s.pickByRate(false, cut, weighed, now); p != nil {
					return p
				}
			}
			return s.pickByRate(true, cut, weighed, now)
		}
	}
	for _, skip := range [2]bool{false, true} {
		if lost < 0 {
			for i := 0; i < len(s.paths); i++ {
				p := s.paths[(s.rrPath+i)%len(s.paths)]
				if s.usable(p, skip) && s.c.ep.ports.ready(p.Plane(), now) && shortEnough(p, cut) {
					s.rrPath = int(p.ID()) + 1
					return p
				}
			}
			continue
		}
		// Losses on a plane come together, from a burst on one of its links
		// or a failing link. So a resend goes to another plane when one can
		// take it, on the path with the shortest RTT there.
		var best *sendPath
		lostPlane := -1
		if lost < len(s.paths) {
			lostPlane = s.paths[lost].Plane()
		}
		for _, otherPlane := range [2]bool{true, false} {
			for _, p := range s.paths {
				if int(p.ID()) == lost || !s.usable(p, skip) || !s.takesResend(p, now) || otherPlane && p.Plane() == lostPlane {
					continue
				}
				if best == nil || p.RTT.Samples > 0 && (best.RTT.Samples == 0 || p.RTT.SRTT < best.RTT.SRTT) {
					best = p
				}
			}
			if best != nil {
				break
			}
		}
		if best == nil && lost < len(s.paths) && s.usable(s.paths[lost], skip) && s.takesResend(s.paths[lost], now) {
			best = s.paths[lost]
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// takesResend reports whether p's port takes a resend at now. A port
// holds back resends only while its plane's own queue limits it: what that
// queue dropped, sent again at once, it would drop again.
func (s *sender) takesResend(p *sendPath, now clock.Time) bool {
	ports := s.c.ep.ports
	return !ports.limited(p.Plane()) || ports.ready(p.Plane(), now)
}

// pickByRate sprays new data over the usable paths in proportion to their
// ports' rates, when the endpoint knows them: each plane's paths together
// take the share of the packets its port's rate is of all the ports'.
// Round robin would give a half-rate plane of four a quarter of the packets,
// a seventh being its share; its port holds back the rest only once it is
// busy, and the receivers' half-rate downlinks of that plane take what it
// lets through. Each path keeps a pass, the time its packets took of its
// share, and the path with the lowest goes next (stride scheduling). A path
// that sat out, out of service or full, counts from the connection's
// present pass, so that it does not take a burst on its return. Paths in
// SKIP are usable where skip is set, and each of their packets advances
// the pass twice as far (skipWeight). Where weighed is set, near the end
// of what is posted (endInSight), a path whose route queues advances its
// pass further for each packet (queueWeight).
func (s *sender) pickByRate(skip bool, cut time.Duration, weighed bool, now clock.Time) *sendPath {
	ports := s.c.ep.ports
	var best *sendPath
	var bestPass float64
	for i := 0; i < len(s.paths); i++ {
		p := s.paths[(s.rrPath+i)%len(s.paths)]
		if !s.usable(p, skip) || !ports.ready(p.Plane(), now) || !shortEnough(p, cut) {
			continue
		}
		if pass := max(p.pass, s.pass); best == nil || pass < bestPass {
			best, bestPass = p, pass
		}
	}
	if best == nil {
		return nil
	}
	s.rrPath = int(best.ID()) + 1
	s.pass = bestPass
	weight := 1.0
	if weighed {
		weight = s.queueWeight(best)
	}
	if best.State() == pathmgr.Skip && !skipFirst {
		weight *= skipWeight
	}
	best.pass = bestPass + s.stride(best.Plane())*weight
	return best
}

// skipWeight multiplies what a packet on a path in SKIP costs of its pass:
// the path takes half the turns of a clear path on a port of the same
// rate (spec section 6.4: a marked path carries less), and the paths not
// in SKIP take the rest in proportion to their shares. Held to clear paths
// while any had room, the new data of senders that their hints hold, not
// their windows, all went to the routes that happened to be clear at that
// instant, and those queues overflowed (docs/cc.md, "Half a share, not
// none while a clear path has room").
const skipWeight = 2

// skipFirst restores, for the tests that measure skipWeight, the rule
// before it: new data goes to a path in SKIP only when no clear path takes
// it.
var skipFirst bool

// queueWeightOff turns the queue weight off, for the tests that measure
// it.
var queueWeightOff bool

// endInSight reports whether what is left to send of what is posted takes
// less than routeWeightTail least RTTs at the rate the connection's
// packets are acknowledged (sampleDelivery). From then on new data goes by
// its routes' queues (queueWeight). Switches hash each path onto one of
// their links (spec section 6.3), so some links carry more of a fabric's
// paths than others, and a flow's last packets wait in the queues its
// busiest routes keep, with no later round trip to even it out. Before
// then the windows and marks share the links, and every connection moving
// off the same samples at once would only move the queues.
func (s *sender) endInSight() bool {
	if queueWeightOff || !(s.delivery.rate > 0) {
		return false
	}
	least, _ := s.leastRTTs()
	return least > 0 && float64(s.unsent)/s.delivery.rate < routeWeightTail*least.Seconds()
}

// routeWeightTail is how many round trips of data before the end of what
// is posted endInSight holds.
const routeWeightTail = 3

// queueWeight is what a packet on p costs of its pass for the queue on its
// route, against the connection's other paths on ports of the same rate:
// more for a path whose route queues, so that the paths that cross idle
// links take more of the new data. The weights of those paths in service
// are scaled so that, each weighed by its share (1/stride), their inverses
// sum to the shares: together they keep the share of their ports' rates,
// so a slower plane's share does not move, and a queue they all meet, at
// an incast's receiver, moves nothing. One rate class and not one plane:
// with a path a plane, the route that queues is another plane's, and the
// last data leaves it for a plane whose route does not (docs/cc.md, "The
// last round trips"). A path alone in its class weighs 1. p is usable
// (pickByRate), so in service and among those it is scaled over.
func (s *sender) queueWeight(p *sendPath) float64 {
	var inverse, shares float64 // over the class
	n := 0
	ports := s.c.ep.ports
	for _, o := range s.paths {
		if ports.sameRate(o.Plane(), p.Plane()) && o.InUse() && !o.returning {
			share := 1 / s.stride(o.Plane())
			inverse += share / o.routeWeight()
			shares += share
			n++
		}
	}
	if n <= 1 {
		return 1
	}
	return p.routeWeight() * inverse / shares
}

// routeWeight is 1 + q / (2 x least RTT), q the one-way queue of the
// path's latest ACK record and the RTT the path's own, at most
// maxRouteWeight. Half the queue, not all of it: the sample is a round
// trip old, and every connection on the link moves off it on the same
// sample.
func (p *sendPath) routeWeight() float64 {
	if !p.queued || p.RTT.Min <= 0 {
		return 1
	}
	return min(1+float64(p.queue)/float64(2*p.RTT.Min), maxRouteWeight)
}

// maxRouteWeight keeps a path at a quarter of its share or more (an
// eighth in SKIP, skipWeight): its packets' ACKs bring the samples that
// show its queue gone, and a queue misread (a clock's drift reads as one,
// cc.DelayBase) does not take the path out of the spray, nor push its pass
// past the next messages.
const maxRouteWeight = 4

// tailCut is the longest least RTT a path may have and still take new data
// now. Near the end of what is posted, a packet on a path much longer than
// the fastest arrives after the fastest could have carried all the rest,
// and its message completes that much later: a plane of long links would
// add its extra round trip to every message. So new data leaves a path
// whose least RTT exceeds the fastest path's by more than the time the
// connection needs to send what is left at the rate its packets are
// acknowledged (sampleDelivery), plus the wait until the fastest path can
// take a packet: its port's backlog, a slot of its window when that is
// full, or the end of its gap under one packet (the earliest completion
// rule of multipath schedulers). It returns no limit before the first RTT
// sample or rate.
func (s *sender) tailCut(now clock.Time) time.Duration {
	const none = time.Duration(math.MaxInt64)
	var fastest *sendPath
	for _, p := range s.paths {
		if p.RTT.Samples > 0 && (fastest == nil || p.RTT.Min < fastest.RTT.Min) && s.carries(p, now, true) {
			fastest = p
		}
	}
	if fastest == nil {
		return none
	}
	left := float64(s.unsent) / s.delivery.rate // seconds
	if !(left < 1) {
		return none // no rate yet, or a second or more to go
	}
	var wait time.Duration
	if !fastest.roomy() {
		wait = fastest.RTT.SRTT / time.Duration(max(fastest.window, 1))
	}
	if at := fastest.spacedAt(); at > now {
		wait = max(wait, at.Sub(now)) // a window under one packet
	}
	if ports := s.c.ep.ports; !ports.ready(fastest.Plane(), now) {
		wait = max(wait, ports.readyAt(fastest.Plane()).Sub(now))
	}
	return fastest.RTT.Min + wait + time.Duration(left*1e9)
}

// sampleDelivery closes an interval of the delivery rate once it has
// lasted the least smoothed RTT of the connection's paths; the longest
// would be too slow to follow a change. The windows' rate is no measure
// of delivery: behind a long queue their packets take far longer than the
// least RTT it divides by. The rate is a moving average of the intervals'
// rates. ACK records come in batches, so an interval of one round trip
// holds fewer or more of them than the mean, and its rate alone would be a
// fraction or a multiple of the rate the rest goes at (docs/cc.md, "The
// end of what is posted").
func (s *sender) sampleDelivery(at clock.Time) {
	// The newest interval weighs a quarter: the average spans a few round
	// trips, long enough to hold several batches and short enough that the
	// end of a transfer, where tailCut reads it, follows the hint's rises.
	const newest = 0.25
	d := &s.delivery
	var acked uint64
	var srtt time.Duration
	for _, p := range s.paths {
		acked += p.Counters.Acked
		if p.RTT.Samples > 0 && (srtt == 0 || p.RTT.SRTT < srtt) {
			srtt = p.RTT.SRTT
		}
	}
	switch {
	case d.at == 0:
		d.at, d.acked = at, acked
	case srtt > 0 && at.Sub(d.at) >= srtt:
		rate := float64(acked-d.acked) * s.mss / at.Sub(d.at).Seconds()
		if d.rate == 0 {
			d.rate = rate
		} else {
			d.rate += (rate - d.rate) * newest
		}
		d.at, d.acked = at, acked
	}
}

// shortEnough reports whether p may take new data under tailCut's limit. A
// path not yet sampled may: nothing says it is long.
func shortEnough(p *sendPath, cut time.Duration) bool {
	return p.RTT.Samples == 0 || p.RTT.Min <= cut
}

// stride is how far a packet moves the pass of a path on plane: the
// connection's paths on that plane over its port's rate. A plane given no
// rate counts as fast as the fastest port, so that it takes its share and
// no more.
func (s *sender) stride(plane int) float64 {
	return float64(s.pathsOnPlanes()[plane]) / s.c.ep.ports.shareRate(plane)
}

// pathsOnPlanes counts the connection's paths on each plane. It is counted
// when first needed once the paths are made (equip), and again after one
// moves (moveTo).
func (s *sender) pathsOnPlanes() []int {
	if s.planePaths == nil {
		n := len(s.c.ep.cfg.Planes)
		on := make([]int, n)
		for _, p := range s.paths {
			if q := p.Plane(); q < n {
				on[q]++
			}
		}
		if s.paths == nil {
			return on // none yet: not kept, so that equip's paths are counted
		}
		s.planePaths = on
	}
	return s.planePaths
}
