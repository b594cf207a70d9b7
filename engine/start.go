// The start of a connection's windows: from the first window to the
// receiver's share of the bandwidth-delay product in one step (docs/cc.md,
// "The sender: a window per path, a rate per connection").

package engine

import (
	"math"
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/proto"
)

// firstWindow is how many packets the connection sends before its first
// ACK.
func (s *sender) firstWindow() int {
	if s.first > 0 {
		return s.first
	}
	return int(cc.DefaultWindow.Initial)
}

// openFirstWindow makes the first window, unless Config.FirstWindow is
// FirstWindowFixed, one bandwidth-delay product: the handshake's round trip times
// the line rate of the NIC ports the paths leave by (Config.PortRates),
// each plane counted once, shared among the endpoint's connections that
// start alike (openedAlike), where that share is more than
// cc.DefaultWindow.Initial. A share that is has the packets its receiver
// may hold the first ACK for added (ackHold): that ACK comes that much
// after the handshake's round trip, and a window without them leaves the
// line idle until it does.
// The paths share it as they share the default one. The share keeps what
// a host sends before its first ACKs near one BDP of its NIC, and each
// connection's ACK hold: a host that opens a connection to every other, as
// in an all-to-all, would otherwise put a BDP of each into queues that its
// receivers' hints reach only a round trip later. It runs once the sender
// has paths and the connection is established, before anything is sent,
// and again when a keep-alive timed the round trip a handshake that went
// more than once did not (timeRoundTrip); without a measured round trip
// or the ports' rates, the first window stays as it is.
//
// A first window of less than a BDP costs a round trip of the line rate
// at the start of every transfer, which is most of a short transfer's
// time where the BDP is hundreds of packets (400 Gb/s, 12.5 µs). The port
// rule (ports.go) spaces the window at the line rate, and N senders to one
// receiver lose what their N windows put beyond its queue; the receiver's
// hints cut them a round trip later (spec section 5.5).
func (s *sender) openFirstWindow() {
	c := s.c
	if !s.firstWindowToSize() || s.paths == nil || c.hsRTT <= 0 {
		return
	}
	rate := s.portsRate() / float64(c.ep.openedAlike(c)) // this connection's share of its ports
	share := math.Ceil(rate * c.hsRTT.Seconds() / s.mss)
	if share <= cc.DefaultWindow.Initial {
		return
	}
	most := float64(len(s.paths) * c.ep.cfg.PathWindow)
	s.first = int(min(share+s.ackHold(rate), most))
	each := math.Ceil(float64(s.first) / float64(len(s.paths)))
	for _, p := range s.paths {
		p.cwin.Raise(each)
		p.windowChanged()
	}
}

// ackHold is how many packets the receiver may hold its first ACK for, at
// rate bytes a second: AckEvery, or what arrives in AckDelay where that is
// fewer (spec section 6.6). The handshake does not tell the peer's
// settings, so the sender counts its own.
func (s *sender) ackHold(rate float64) float64 {
	cfg := &s.c.ep.cfg
	return min(float64(cfg.AckEvery), math.Ceil(rate*cfg.AckDelay.Seconds()/s.mss))
}

// openedAlike counts the endpoint's established connections that start
// as c does: opened as c was (by its own CONNECT, or by a peer's), and
// not yet acknowledged, c among them. A connection past its first window
// sends at what its ACKs allow, not at its first window.
func (e *Endpoint) openedAlike(c *Conn) int {
	n := 0
	for _, o := range e.conns {
		if o.initiator == c.initiator && o.state == Established && !o.snd.heard {
			n++
		}
	}
	return max(n, 1)
}

// firstWindowToSize reports whether a first window of one bandwidth-delay
// product is still to be sized (openFirstWindow), given a round trip: the
// connection is established in multipath mode with FirstWindowBDP, the
// ports' rates are known, and nothing has been sent.
func (s *sender) firstWindowToSize() bool {
	c := s.c
	return c.ep.cfg.FirstWindow == FirstWindowBDP && c.state == Established && s.stats.Packets == 0 &&
		c.mode == proto.ModeMultipath && len(c.ep.cfg.PortRates) > 0
}

// portsRate is the rate of the NIC ports the connection's paths leave by
// (Config.PortRates), each plane counted once, or 0 where the ports'
// rates are not known. It reads the planes' counts (pathsOnPlanes), not
// every path: every ACK record reads it (subPacketWindows), and a
// connection may have hundreds of paths.
func (s *sender) portsRate() float64 {
	rates := s.c.ep.cfg.PortRates
	if len(rates) == 0 {
		return 0
	}
	var rate float64
	for pl, on := range s.pathsOnPlanes() {
		if on > 0 && pl < len(rates) {
			rate += rates[pl]
		}
	}
	return rate
}

// receiverBound reports whether the receiver grants less than half of
// what the connection's NIC ports send: its link, or its share of it, is
// the bottleneck the hint describes, and a queue there is the receiver's
// to drain (inbound.go).
func (s *sender) receiverBound() bool {
	return s.hinted() && s.hint < s.portsRate()/2
}

// subPacketWindows reports whether the paths' windows may fall under one
// packet (cc.Window.WholePackets): where the endpoint knows what its NIC
// sends, its ports' rates or else its OutboundCapacity, and the receiver
// sends hints and grants at least half of that. Where it grants less, its
// link is the bottleneck, and the hint paces the packets and answers the
// queue there. Without hints the windows alone share a bottleneck, and
// windows under a packet, which grow by a share of themselves, do not
// converge to fair shares as additive increase does. Without the NIC's
// rate, as on the kernel path, whose timers fire up to a millisecond late,
// the windows stay whole: a gap would be late by as much.
func (s *sender) subPacketWindows() bool {
	nic := s.portsRate()
	if nic == 0 {
		nic = s.c.ep.cfg.OutboundCapacity
	}
	return nic > 0 && s.hinted() && s.hint >= nic/2
}

// grantRounds is how many of its least round trips a connection may grow
// its windows by grant after its receiver's share rose (shareRose).
const grantRounds = 4

// shareRose opens the grant (cc.Window.Grant) for grantRounds of the
// connection's least round trip: the receiver's share rose, as when other
// senders of an incast finish, and the windows may take it in a few round
// trips. A share that stays as it was opens nothing, so that a bottleneck
// before the receiver, which marks, holds the windows by DCTCP's rule
// alone: a grant there doubled each window between its cuts and kept the
// queue above the marking threshold.
func (s *sender) shareRose(now clock.Time) {
	least, _ := s.leastRTTs()
	s.grantUntil = now.Add(grantRounds * least)
}

// granted reports whether the receiver's share rose in the last few round
// trips (shareRose) and its hint is above the rate the windows give at
// their paths' least round trips (cc.Window.Grant). The sender grants
// growth by it only on planes whose queues mark: the hint knows the
// receiver's link, not a bottleneck before it, and where that marks
// nothing only the delay signal brakes, a round trip after the queue
// passed its target, which windows that doubled overflow.
func (s *sender) granted() bool {
	return s.c.ep.clock.Now() < s.grantUntil && s.underHint()
}

// underHint reports whether the receiver's hint is above the rate the
// windows give at their paths' least round trips: it grants more than
// they carry.
func (s *sender) underHint() bool {
	return s.hinted() && s.windowsRate() < s.hint
}

// trainPackets is how many packets of the first window must be
// acknowledged after the first ACK before their spacing gives a rate.
const trainPackets = 8

// slowerStart is how far below the hint the first window's rate must be
// for the start to follow it rather than the hint. The first windows of
// many connections leave at once, and on a fabric that hashes paths, two
// or three of them meet on one link and come back at a half or a third of
// its rate for that burst alone, which no later round trip shows. A link
// slower by more than that is the sender's own bottleneck.
const slowerStart = 0.25

// startFromHint raises the connection's windows, once, to what its
// receiver's share keeps in flight over the shortest round trip seen: the
// rate hint times that RTT, or less where the first window arrived at
// under slowerStart of the hint. It does so once trainPackets more packets
// are acknowledged after the first ACK, and not at all once a path saw a
// CE mark or a queue above its delay target (cc.DelayParams), timed out or
// had a packet dropped by the local host (localdrop.go).
//
// A receiver that grants less than half of what the sender's ports send
// (receiverBound) is the bottleneck, as one of N in an incast: the first
// windows of all its senders queue at its link, whose marks its hold
// answers (inbound.go). The start then goes ahead despite the marks, to the
// hint times the largest smoothed round trip, which that queue is in:
// windows of the hint times the least round trip would carry less than
// the hint until the queue drained.
//
// The hint knows the receiver's side only. The first window leaves back to
// back, so the spacing of its acknowledgments is the rate of the slowest
// link it crossed, the sender's own host included: a sender behind a slow
// qdisc measures its own bottleneck. Each path keeps its part of the total
// in proportion to its window, and never goes past PathWindow.
//
// The spacing of the acknowledgments is a bottleneck's rate only where the
// packets left closer together than they came back. Where they left at
// half that rate or slower, the sender's own window spaced them: under
// heavy loss the first ACKs report a packet or two a path, and the train
// is made of packets sent a round trip after one another, whose rate says
// nothing of the path. The start then follows the hint. It does so too
// once a packet of the connection was declared lost: an ACK lost reports
// its packets with the next, a gap that reads as a slow link, and where
// ACKs are lost data is lost as well. The cost: a link slower than the
// hint that drops part of the first window before its queue shows above
// the delay target (cc.DelayParams) is overshot; its queue shows first
// wherever its buffer holds the delay target's worth.
//
// A first window of FirstWindowFixed's 16 packets, or one without the
// ports' rates to size it, is one bandwidth-delay product at 100 Gb/s and
// a few microseconds. At 400 Gb/s and 12.5 µs a BDP is near 150 packets,
// and windows that grow one packet a round trip take most of a transfer
// to get there. The hint is the receiver's max-min share among
// every sender it sees (spec section 5.5), so N senders to one receiver
// start at a BDP together, not N of them: an incast keeps its queue.
func (s *sender) startFromHint(at clock.Time) {
	if s.started || math.IsInf(s.hint, 1) || s.paths == nil {
		return
	}
	var total float64
	var acked, lost uint64
	var minRTT time.Duration
	bound := s.receiverBound()
	for _, p := range s.paths {
		if (p.Counters.CEMarks > 0 || p.cwin.QueueSeen()) && !bound || p.Counters.Timeouts > 0 || p.Counters.LocalDrops > 0 {
			s.started = true // congestion, a fault or the local host spoke first
			return
		}
		acked += p.Counters.Acked
		lost += p.Counters.Lost
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
		s.train.firstSent = clock.Never // no packet of the train yet (trainSent)
		return
	case acked < s.train.acked+trainPackets || at == s.train.at || minRTT == 0 || total == 0:
		return // the next ACK tries again
	}
	s.started = true
	rate := s.hint
	ackSpan := at.Sub(s.train.at)
	sendSpan := max(s.train.lastSent.Sub(s.train.firstSent), 0) // 0 where every packet was a resend
	if delivered := float64(acked-s.train.acked) * s.mss / ackSpan.Seconds(); delivered < slowerStart*s.hint && 2*sendSpan < ackSpan && lost == 0 {
		rate = delivered
	}
	rtt := minRTT
	if bound {
		rtt = max(rtt, s.slowestRTT().SRTT)
	}
	target := rate * rtt.Seconds() / s.mss
	if target > total {
		for _, p := range s.paths {
			if p.InUse() {
				p.cwin.Raise(p.cwin.Value() * target / total)
				p.windowChanged()
			}
		}
	}
	if !bound {
		// The round trip the windows fit: rtt, or the handshake's where
		// the first window, sized by it, was larger (openFirstWindow).
		s.startRTT = rtt
		if total > target {
			s.startRTT = max(rtt, s.c.hsRTT)
		}
		s.fitted = make([]bool, len(s.pathsOnPlanes()))
		for pl, on := range s.pathsOnPlanes() {
			s.fitted[pl] = on == 0 // a plane the start sized no window on has none to fit
			s.fitLongPlane(pl)
		}
	}
}

// fitLongPlaneOff turns fitLongPlane off, for the test that compares with
// it.
var fitLongPlaneOff bool

// longPlane is how many times the start's round trip a plane's least
// round trip must exceed before its paths' windows are sized by their own
// (fitLongPlane). A queue that holds a round trip's worth of packets marks
// wherever ECN thresholds sit below a bandwidth-delay product, so a round
// trip that much longer, unmarked, is a longer route. A shorter excess may
// be a queue the first windows made, which a larger window only lengthens
// (docs/cc.md).
const longPlane = 2

// fitLongPlane raises the windows of the paths on plane pl, once, so that
// at the plane's least round trip they carry what they carried at the
// start's (startRTT), where the plane's is more than longPlane times as
// long. The start sizes every window by the least round trip it has seen,
// and a plane of longer links (spec section 6.3) often has no sample by
// then: its paths would carry a fraction of their share, and additive
// increase, a packet a path each of the plane's round trips, takes most of
// a transfer to make it up. It looks once the plane has a sampled path, at
// the start or at the first ACK record after it that samples the plane.
// Not where the receiver is the bottleneck (receiverBound): the start took
// the longest round trip there, that of the queue at its link. Nor for a
// plane whose sampled paths marked or queued past the delay target, or
// whose paths timed out: its round trip may be a queue's. The host's
// scheduling delay (hostLate) is taken off the plane's round trip, as a
// stall lengthens a sample on any plane.
func (s *sender) fitLongPlane(pl int) {
	if s.startRTT == 0 || pl >= len(s.fitted) || s.fitted[pl] || fitLongPlaneOff {
		return
	}
	var least time.Duration
	quiet := true
	for _, p := range s.paths {
		if p.Plane() != pl {
			continue
		}
		quiet = quiet && p.Counters.Timeouts == 0
		if p.RTT.Samples == 0 {
			continue
		}
		quiet = quiet && p.Counters.CEMarks == 0 && !p.cwin.QueueSeen()
		if least == 0 || p.RTT.Min < least {
			least = p.RTT.Min
		}
	}
	if least == 0 {
		return // no sample yet: the next ACK record that samples the plane calls again
	}
	s.fitted[pl] = true
	least -= s.c.ep.hostLate()
	if !quiet || least <= longPlane*s.startRTT || s.receiverBound() {
		return
	}
	stretch := float64(least) / float64(s.startRTT)
	for _, p := range s.paths {
		if p.Plane() == pl && p.InUse() {
			p.cwin.Raise(p.cwin.Value() * stretch)
			p.windowChanged()
		}
	}
}

// trainSent widens the span of the sending of the packets acknowledged
// since the first ACK (startFromHint) to take in one sent at sent.
func (s *sender) trainSent(sent clock.Time) {
	s.train.firstSent = min(s.train.firstSent, sent)
	s.train.lastSent = max(s.train.lastSent, sent)
}
