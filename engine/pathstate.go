// What the sender does on a path's events. This file handles state
// transitions, planes going down and up, probes and their replies, and loss
// outliers (spec sections 6.3 and 6.4). The state machine itself is
// pathmgr.Path.

package engine

import (
	"slices"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// PathChanged follows a transition of the path's state machine, as its
// pathmgr.Listener. The pacing rate counts the path's window only while the
// path is in use, and the application hears of the change.
func (p *sendPath) PathChanged(from pathmgr.State, repath bool) {
	p.rateChanged()
	c := p.s.c
	to := p.State()
	if c.ep.tracer != nil {
		c.trace(TraceEvent{Kind: TracePath, Path: int(p.ID()), From: from, To: to, Repath: repath,
			SrcPort: p.Port(), Epoch: p.Epoch()})
	}
	if o, ok := c.events.(PathObserver); ok {
		o.PathChanged(c, PathEvent{Path: int(p.ID()), Plane: p.Plane(), From: from, To: to, Repath: repath,
			SrcPort: p.Port(), Epoch: p.Epoch(), At: c.ep.clock.Now()})
	}
}

// planeDown is multipath's handling of a plane that went down. The path
// leaves service with its plane, and what it had in flight is resent on
// other paths.
func (p *sendPath) planeDown() {
	for psn := p.oldest; psn != p.next; psn++ {
		if r := p.slot(psn); !r.resolved && r.psn == psn {
			p.resolveLost(r, psn, LossPlaneDown)
		}
	}
	p.advance()
	p.timer.Stop()
	p.PlaneDown()
}

// planeUp is multipath's handling of a plane that came back. The path is
// probed, and it takes data again once a probe is answered.
func (p *sendPath) planeUp(now clock.Time) {
	p.timeouts = 0
	p.PlaneUp(true)
	p.sendProbe()
	p.armTimer(now)
}

// repath moves the path to a new source port (pathmgr.Path.Repath). Its PSN
// space continues at the next PSN (spec section 6.3). Its queue samples
// were of the route it leaves (relieves, routeWeight, routeClear).
func (p *sendPath) repath(now clock.Time) bool {
	if !p.Repath(now, p.next) {
		return false
	}
	p.queued, p.markQueue = false, 0
	return true
}

// leftPlane declares lost what the path still has in flight when it left
// its plane out of service: a timeout while the peer was quiet left it
// there (peerQuiet), and the path left because its plane answers no more
// where another does (onPlaneProbeReply). A new source port is no such
// sign: a stalled peer leaves probes unanswered too, and its socket holds
// what the path sent.
func (p *sendPath) leftPlane() {
	if !p.InUse() && p.inflight > 0 {
		p.declareInFlight(clock.Never)
	}
}

// stranded reports whether no path of the connection is in service: every
// plane it has paths on failed, or the peer is gone. A sender not yet
// equipped with paths is not.
func (s *sender) stranded() bool {
	if len(s.paths) == 0 {
		return false
	}
	for _, p := range s.paths {
		if p.InUse() {
			return false
		}
	}
	return true
}

// stuck reports whether the path is out of service and its plane looks
// failed: the host sees the plane down, or no path of the connection on
// it is in service. A path alone on its plane cannot tell its plane from
// its route, and counts as stuck once soloProbes of its probes went
// unanswered, when a new source port would be its next try (routeSuspect).
func (p *sendPath) stuck() bool {
	switch {
	case p.InUse():
		return false
	case p.State() == pathmgr.Down:
		return true
	case p.State() != pathmgr.AssumedBad || p.planeServed():
		return false
	}
	return !p.alone() || p.timeouts >= soloProbes
}

// wantsPlane reports whether the connection is stranded, or a path of it
// is stuck on a plane that looks failed. Such a path moves to a plane none
// of the connection's paths is on, once a probe shows that plane works
// (spec section 6.3): a connection with fewer paths than planes would
// otherwise carry on fewer paths while planes it could use work, and stop
// when every plane it has paths on failed.
func (s *sender) wantsPlane() bool {
	return s.stranded() || slices.ContainsFunc(s.paths, (*sendPath).stuck)
}

// planeProbeBits marks the ProbeIDs of plane probes: the two top bits,
// above those of MTU probes (mtuProbeBit) and path probes.
const planeProbeBits = 3 << 30

// probePlanes sends a PROBE on each plane the connection has no path on,
// whose peer address it knows and whose port the host does not see down,
// when a path of it is stuck (wantsPlane). A reply shows a plane that
// works both ways, and a stuck path moves there (onPlaneProbeReply); a
// peer that is gone, or a host that does not run, answers on no plane, and
// nothing moves. The next round goes BadProbeMax later while a path stays
// stuck, since paths DOWN with their plane have no timer of their own.
// Only multipath connections move (the baseline keeps one route, spec
// section 10). It reports whether it sent any: where the connection has a
// path on every plane, there is nowhere to move, and it sends none.
func (s *sender) probePlanes() bool {
	c := s.c
	if c.mode != proto.ModeMultipath || c.state != Established {
		return false
	}
	s.ensurePlaneProbes()
	sent, silent := false, false
	for plane := range s.planeProbe {
		on := s.hasPathOn(plane)
		// The last round's probe went unanswered; a search's probe is not
		// one of the rounds', and the search gives way to them.
		silent = silent || s.planeProbe[plane] != 0 && !on && !s.seeking(plane)
		s.planeProbe[plane] = 0
		if on || !c.knows(plane) || c.ep.down[plane] {
			continue
		}
		s.probePlane(plane, 0)
		sent = true
	}
	s.endSeek() // its probes were replaced
	if silent {
		s.silentPlaneRounds = min(s.silentPlaneRounds+1, 2)
	}
	if sent {
		s.planeT.Reset(c.ep.clock.Now().Add(c.ep.cfg.BadProbeMax))
	}
	return sent
}

// hasPathOn reports whether a path of the connection is on plane.
func (s *sender) hasPathOn(plane int) bool { return s.pathsOnPlanes()[plane] > 0 }

// probePlane sends a plane probe on plane under a new ProbeID, which a
// reply must name (onPlaneProbeReply), padded by pad bytes.
func (s *sender) probePlane(plane, pad int) {
	s.ensurePlaneProbes()
	s.planeProbe[plane] = planeProbeBits | s.c.ep.random32()>>2
	s.c.sendPlaneProbe(plane, s.planeProbe[plane], pad)
}

// ensurePlaneProbes makes the plane probes' state when first needed.
func (s *sender) ensurePlaneProbes() {
	if s.planeProbe == nil {
		s.planeProbe = make([]uint32, len(s.c.ep.cfg.Planes))
		s.planeT = s.c.ep.clock.NewTimer(s.onPlaneTimer)
	}
}

// onPlaneTimer probes the planes again while a path is stuck.
func (s *sender) onPlaneTimer() {
	if s.wantsPlane() {
		s.probePlanes()
		s.c.ep.flush()
	}
}

// onPlaneProbeReply takes the reply to a plane probe, and its round trip
// where sampled: the plane works, and a stuck path, or any path out of
// service of a stranded connection, moves to it (spec section 6.3), one
// path a plane. The path is probed there before it carries data. Failing
// that, a path whose home the plane is goes back to it (goTo), unless its
// length would hold the path back there; and a search for a shorter
// plane takes the round trip (leaveLongPlane).
func (s *sender) onPlaneProbeReply(id uint32, rtt time.Duration, sampled bool, now clock.Time) {
	plane := slices.Index(s.planeProbe, id)
	if plane < 0 {
		return
	}
	s.planeProbe[plane] = 0 // answered
	s.silentPlaneRounds = 0
	sought := s.seeking(plane)
	if sought {
		s.seekPlanes[plane] = false
	}
	if s.hasPathOn(plane) {
		return // a path moved here already
	}
	if s.wantsPlane() {
		stranded := s.stranded() // then any path out of service may move
		for _, p := range s.paths {
			if p.InUse() || !stranded && !p.stuck() {
				continue
			}
			if p.moveTo(plane, now) {
				s.probeHomes() // it may come back once its own plane works
				return
			}
		}
	}
	for _, p := range s.paths {
		if p.home != plane || p.returning || now < p.MovableAt() {
			continue
		}
		if sampled && rtt > p.RTT.Min+p.RTT.Min/3 && s.heldByLength(p, now) {
			// Its home answers a third longer than its plane, whose
			// length holds it back already: where it is becomes its
			// home, rather than going back and leaving again.
			p.home = p.Plane()
			return
		}
		p.goTo(plane, now)
		return
	}
	if sought && sampled {
		s.leaveLongPlane(plane, rtt, now)
	}
}

// mayGo reports whether plane may take the path now: the path is not on
// it, no other path of its connection is, its peer address there is known
// and the host does not see it down.
func (p *sendPath) mayGo(plane int) bool {
	return p.Plane() != plane && !p.s.hasPathOn(plane) && p.s.c.knows(plane) && !p.s.c.ep.down[plane]
}

// moveTo moves the path to plane (spec section 6.3) and probes it there,
// and reports whether the path could move yet.
func (p *sendPath) moveTo(plane int, now clock.Time) bool {
	if !p.Move(now, p.next, plane) {
		return false
	}
	p.s.planePaths = nil             // counted again when next needed (pathsOnPlanes)
	p.queued, p.markQueue = false, 0 // news of the plane it left (relieves, routeWeight, routeClear)
	p.leftPlane()
	p.s.stats.PlaneMoves++
	p.planeUp(now) // probed, out of service until it answers
	return true
}

// probeHomes sends a plane probe to the home of each path away from it
// that may move now (mayGo, and the MPL rule of section 6.3), and arms
// homeT for when the next may, or an MPL on. A path that left a failed
// plane would otherwise keep its connection off that plane for its life
// once the plane is repaired, and the endpoint's paths would crowd the
// others. SetPlaneUp calls it when the host sees a plane come back.
func (s *sender) probeHomes() {
	c := s.c
	if c.mode != proto.ModeMultipath || c.state != Established {
		return
	}
	now := c.ep.clock.Now()
	var next clock.Time
	for _, p := range s.paths {
		// A home the host sees down is probed when it comes back
		// (SetPlaneUp), and one whose peer address is not known cannot be.
		if !p.mayGo(p.home) || p.returning {
			continue
		}
		at := p.MovableAt()
		if at <= now {
			at = now.Add(c.ep.cfg.MPL)
			s.probePlane(p.home, 0)
		}
		if next == 0 || at < next {
			next = at
		}
	}
	if next != 0 {
		if s.homeT == nil {
			s.homeT = c.ep.clock.NewTimer(s.onHomeTimer)
		}
		s.homeT.Reset(next)
	}
}

// onHomeTimer probes the homes again.
func (s *sender) onHomeTimer() {
	s.probeHomes()
	s.c.ep.flush()
}

// goTo sends the path to plane, which a probe showed works: back to its
// home, or to a shorter plane (leaveLongPlane), which becomes its home once
// it is there. A path with packets in flight first drains, taking no new
// data (usable), so that none of them is left unrecorded on the old route
// (section 6.3); pump moves it once they are resolved. Where the plane may
// no longer take it by then, down or taken by another path, or the path
// may not move, the move is given up, and a home the path is away from is
// probed again later.
func (p *sendPath) goTo(plane int, now clock.Time) {
	if p.inflight > 0 && p.mayGo(plane) {
		if !p.returning {
			p.returning = true
			p.s.returning++
		}
		p.bound = plane
		return
	}
	if p.returning {
		p.returning = false
		p.s.returning--
	}
	if !p.mayGo(plane) || !p.moveTo(plane, now) {
		p.s.probeHomes()
		return
	}
	if plane != p.home {
		p.home = plane
		p.s.stats.ShorterMoves++
	}
}

// returnHomes moves the draining paths that have drained, and gives up
// the moves that their planes may no longer take.
func (s *sender) returnHomes() {
	now := s.c.ep.clock.Now()
	for _, p := range s.paths {
		if p.returning && (p.inflight == 0 || !p.mayGo(p.bound)) {
			p.goTo(p.bound, now)
		}
	}
}

// routeSuspect reports whether the path's trouble may be its route, which
// a new source port can change. It may when another path of its plane is
// in service. When every path of a plane has timed out together, the plane
// or the host is what failed, a new port cannot help, and the path is only
// probed. A path alone on its plane cannot tell: it moves once
// soloProbes of its probes went unanswered, and then only as often as
// pathmgr.Path.Repath allows.
func (p *sendPath) routeSuspect() bool {
	return p.planeServed() || p.alone() && p.timeouts >= soloProbes
}

// alone reports whether the path is the only one of its connection on its
// plane.
func (p *sendPath) alone() bool {
	for _, q := range p.s.paths {
		if q != p && q.Plane() == p.Plane() {
			return false
		}
	}
	return true
}

// planeServed reports whether another path of the connection on p's plane
// is in service.
func (p *sendPath) planeServed() bool {
	for _, q := range p.s.paths {
		if q != p && q.Plane() == p.Plane() && q.InUse() {
			return true
		}
	}
	return false
}

// sendProbe sends a PROBE on the path (spec section 5.10).
func (p *sendPath) sendProbe() {
	c := p.s.c
	if !c.knows(p.Plane()) {
		return
	}
	id := p.NewProbe()
	var pkt proto.Packet
	c.build(&pkt, proto.TypeProbe, 0, 0)
	pkt.Common.SetDstConnID(c.peerID)
	pkt.Common.SetPathID(p.ID())
	pkt.Common.SetEpoch(p.Epoch())
	pkt.Probe().SetProbeID(id)
	c.emit(&pkt, p.Plane(), p.Port())
}

// heardProbe notes the answer, at at, to a PROBE sent at echo, its
// Timestamp, which the reply echoes (peerAnswered). It goes by the send
// time alone: the reply's ServiceTime may hold a stall of the peer's,
// which a timeout must not take for loss (peerQuiet).
func (s *sender) heardProbe(at clock.Time, echo uint32) {
	if since := uint32(at) - echo; since < 1<<31 {
		s.probeAnswered = max(s.probeAnswered, at.Add(-time.Duration(since)))
	}
}

// onProbeReply takes a PROBE_REPLY. It gives an RTT sample, and brings an
// ASSUMED_BAD path back into service.
func (s *sender) onProbeReply(pkt *proto.Packet, at clock.Time) {
	switch id := pkt.ProbeReply().ProbeID(); {
	case isMTUProbe(id):
		s.c.onMTUProbeReply(id)
		return
	case id&planeProbeBits == planeProbeBits:
		sample := uint32(at) - pkt.ProbeReply().EchoTimestamp() - pkt.ProbeReply().ServiceTime()
		s.heardProbe(at, pkt.ProbeReply().EchoTimestamp())
		s.onPlaneProbeReply(id, time.Duration(sample), sample < 1<<31, at)
		return
	}
	if pkt.ProbeReply().ProbeID() == keepAliveProbe {
		// It answered a keep-alive: having heard it is all it says, but
		// for the round trip a handshake that went more than once did
		// not time (timeRoundTrip).
		s.c.roundTripTimed(pkt.ProbeReply(), at)
		return
	}
	s.equip() // a reply names a path, which must exist to be checked
	id := int(pkt.Common.PathID())
	if id >= len(s.paths) {
		s.stats.BadAcks++
		return
	}
	p := s.paths[id]
	r := pkt.ProbeReply()
	if !p.ProbeAnswers(r.ProbeID(), pkt.Common.Epoch()) {
		return // an old probe's reply
	}
	p.silent, p.tailStrikes = 0, 0
	s.heardProbe(at, r.EchoTimestamp())
	if sample := uint32(at) - r.EchoTimestamp() - r.ServiceTime(); sample < 1<<31 {
		p.rttSample(time.Duration(sample))
	}
	if p.Delivered() {
		if p.timeouts > 0 && s.fullAcked[p.Plane()] < p.lostSince {
			// Data timed out where a small packet crossed, and no packet
			// of full size sent on the plane since has been acknowledged.
			s.c.verifyMTU(p.Plane())
		}
		p.timeouts = 0
		if _, coming := s.answersComing(); coming {
			// Back after the peer's silence: the look at what it left in
			// flight, once the answers are in, starts with a tail probe
			// (hear), which asks the peer to report the path.
			p.probed = false
		} else {
			// The reply passed what the timeout left in flight on the
			// path: that is lost, by the rule of the probes of a path out
			// of service (expired), less an ACK's delay, since the peer
			// answers a PROBE at once and its records may wait that long.
			// Back in service, the path's timer runs a whole timeout, and
			// at a transfer's tail nothing else finds it sooner.
			p.settleMoot()
			p.declareInFlight(s.peerAnswered().Add(-s.c.ep.cfg.AckDelay))
		}
		p.armTimer(at)
		s.pump()
	}
}

// checkLoss adds one ACK record's verdicts on the path's packets to its
// loss measurement. At the end of a round it moves the path to a new source
// port when its loss stands out from the average of the other paths of its
// plane, or of the other planes' when it is alone on its own (see
// pathmgr.Path.LossOutlier). A new port changes the route only within the
// plane, where a switch hashes it (spec section 6.3). Loss that hits every
// path of a plane alike is the plane's, and no port cures it.
// Random loss changes nothing, because loss is not taken as congestion
// here.
func (p *sendPath) checkLoss(now clock.Time, acked, lost int) {
	factor := p.s.c.ep.cfg.LossOutlierFactor
	if !p.CountLoss(acked, lost) || factor < 0 {
		return
	}
	// A path alone on its plane is compared with the other planes'.
	others, n := p.s.lossOf(p, !p.alone())
	if n == 0 || !p.LossOutlier(others/float64(n), factor) {
		return
	}
	if p.s.host.limited() || p.s.c.ep.ports.limited(p.Plane()) {
		// The host drops on its way out, a whole batch of one path at a
		// time, and not every drop is reported: the loss is the host's, and
		// no new route cures it.
		return
	}
	if !p.repath(now) {
		return // it moved less than an MPL ago
	}
	p.s.stats.LossRepaths++
	p.RestartLoss(others / float64(n))
}

// lossOf sums the smoothed loss of the measured paths other than p, of
// p's plane only when samePlane is set, and counts them.
func (s *sender) lossOf(p *sendPath, samePlane bool) (sum float64, n int) {
	for _, q := range s.paths {
		if avg := q.LossAverage(); q != p && (!samePlane || q.Plane() == p.Plane()) && avg >= 0 {
			sum += avg
			n++
		}
	}
	return sum, n
}

// SetPlaneUp tells the endpoint that a plane, a NIC port, went down or came
// back, as the NIC's link state says. The paths of every connection on that
// plane go DOWN, and what they had in flight is resent on the others. When
// the plane comes back they are probed and return to service.
func (e *Endpoint) SetPlaneUp(plane int, up bool) {
	now := e.clock.Now()
	if plane >= 0 && plane < len(e.down) {
		e.down[plane] = !up
	}
	for _, id := range e.connIDs() {
		c := e.conns[id]
		if c.state != Established {
			continue
		}
		c.snd.equip() // its paths on that plane change state, and probe
		for _, p := range c.snd.paths {
			switch {
			case p.Plane() != plane:
			case !up && p.State() != pathmgr.Down:
				c.tp.planeDown(p)
			case up && p.State() == pathmgr.Down:
				c.tp.planeUp(p, now)
			}
		}
		if !up && c.snd.wantsPlane() {
			c.snd.probePlanes() // the plane's paths may carry on another
		}
		if up {
			c.snd.probeHomes() // paths that left it may come back
		}
		c.snd.pump()
	}
	e.flush()
}

// sendKeepAlive sends a keep-alive PROBE on each plane whose peer address
// is known, so that one failed plane does not make a live peer look dead
// (spec section 8.6). It names path 0 and ProbeID 0, which no path probe
// uses, and needs none of the sender's path state.
func (c *Conn) sendKeepAlive() {
	if c.rttProbing {
		c.rttProbe = uint32(c.ep.clock.Now()) // the one timeRoundTrip sent, or its reply, was lost
	}
	for p := range c.remote {
		if c.knows(p) {
			c.sendPlaneProbe(p, keepAliveProbe, 0)
		}
	}
}

// sendPlaneProbe sends a PROBE that tests a plane rather than a path: it
// names path 0 and leaves from the pool's first port, padded by pad bytes
// (spec section 5.10). Keep-alives and plane probes (probePlanes) are such
// PROBEs.
func (c *Conn) sendPlaneProbe(plane int, id uint32, pad int) {
	var pkt proto.Packet
	c.build(&pkt, proto.TypeProbe, 0, pad)
	clear(pkt.Payload)
	pkt.Common.SetDstConnID(c.peerID)
	pkt.Probe().SetProbeID(id)
	c.emit(&pkt, plane, c.ep.cfg.SourcePorts[0])
}
