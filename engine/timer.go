// Timers. A path has one timer for tail probes and retransmission timeouts.
// A connection has an ACK timer and a no-progress timer.

package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// armTimer sets the path's timer from now. While the path may probe
// (mayProbe) it first fires for a tail probe. Then it fires at the retransmission
// timeout, doubled for each timeout in a row. A path in ASSUMED_BAD is
// probed at its timeout. probeOverdue may bring the timer forward.
func (p *sendPath) armTimer(now clock.Time) {
	p.armedAt = now
	if p.inflight == 0 && p.State() != pathmgr.AssumedBad {
		p.timer.Stop()
		return
	}
	p.timer.Reset(p.due())
}

// rearmTimer puts the path's timer off to a timeout at the receiver's new,
// lower share after it was last armed: what is in flight drains more
// slowly (drainTime). It never brings the timer forward, since the drain
// time counts what is in flight now, less than at the arming once other
// packets were acknowledged. From now rather than from the arming, a share
// that fell by a hair on ACK after ACK would put the timer off for as long
// as it kept falling.
func (p *sendPath) rearmTimer() {
	if at := p.due(); at > p.timer.Deadline() {
		p.timer.Reset(at)
	}
}

// due is when the path's timer fires: a timeout after it was armed, or
// sooner when the peer's answers after a silence are in.
func (p *sendPath) due() clock.Time {
	at := p.armedAt.Add(p.timeout())
	if answered, coming := p.s.answersComing(); coming && p.InUse() && answered < at {
		at = answered // looks at its packets once the answers after a silence are in (hear)
	}
	return at
}

// fireBy brings the path's timer forward to at, if it is due later.
func (p *sendPath) fireBy(at clock.Time) {
	if at < p.timer.Deadline() {
		p.timer.Reset(at)
	}
}

func (p *sendPath) onTimer() {
	c := p.s.c
	if c.state != Established {
		return
	}
	now := c.ep.clock.Now()
	if c.ep.tracer != nil {
		c.trace(TraceEvent{Kind: TraceTimer, Path: int(p.ID()), From: p.State(), To: p.State()})
	}
	if !c.tp.expired(p, now) {
		return
	}
	p.armTimer(now)
	p.s.pump()
	c.ep.flush()
}

// expired is multipath's handling of the path's timer. It first settles the
// packets that another transmission delivered. A path in service waits
// while the peer's answers after a silence come in (waitsForAnswers); an
// ASSUMED_BAD path, once they are in, declares lost what a timeout left
// in flight and the answers since passed. Then an ASSUMED_BAD path
// whose probe went unanswered moves to a new source port and probes again.
// A path with packets in flight sends a tail probe, after declaring lost
// what an earlier epoch left that the peer's answers passed, or, when it
// already has, declares its packets lost.
func (p *sendPath) expired(now clock.Time) bool {
	if p.State() != pathmgr.Down {
		p.settleMoot()
	}
	switch {
	case p.State() == pathmgr.Down:
		return false
	case p.State() == pathmgr.AssumedBad:
		_, coming := p.s.answersComing()
		if p.inflight > 0 && !coming {
			if !p.s.peerQuiet(p) {
				// What a timeout in the peer's silence left in flight, and
				// the peer's answers have since passed, is lost (peerQuiet).
				p.declareInFlight(p.s.peerAnswered())
			} else {
				// Quiet again, as at a transfer's tail, where the answer to
				// the timeout's resend may be all it had left to send.
				p.declareOutlived()
			}
		}
		// The route may be what failed, so the path moves to another (spec
		// section 6.3), if its plane shows that a route can be the cause.
		// Where the plane may be what failed, planes the connection has no
		// path on are probed.
		switch {
		case p.timeouts >= 1 && (p.s.stranded() || p.stuck() && p.s.silentPlaneRounds < 2) && p.s.probePlanes():
			// The plane may be what failed: the path waits to move to a
			// plane that answers, rather than to a new port of its own.
			// A stranded connection probes from the first unanswered probe,
			// since nothing is carried meanwhile; random loss that explains
			// the silence keeps a plane's last path in service, so a
			// connection it strands saw more than loss. A path stuck while
			// another carries tries a new port of its own as well once two
			// rounds of plane probes went unanswered: the peer is alive,
			// and the other planes are no better than its route.
		case coming && p.inflight > 0:
			// While the peer's answers after a silence come in, what the
			// path has in flight may be among them. A new source port
			// would start an epoch whose ACK records never report what the
			// old one left in flight (spec section 6.3): only the path's
			// tail probe, once the peer answered later packets, would
			// declare it lost (declarePassedEpochs).
		case p.routeSuspect():
			p.repath(now)
		}
		p.sendProbe()
		p.timeouts = min(p.timeouts, 15) + 1 // at most 16, so that the count never wraps
	case p.inflight == 0:
		return false
	case p.waitsForAnswers():
		return false
	case p.mayProbe():
		if p.declarePassedEpochs() && p.inflight == 0 {
			return true
		}
		p.tailProbe()
	default:
		p.onRTO(false)
	}
	return true
}

// declarePassedEpochs declares lost, at the path's tail probe, what it
// sent before its latest move to a new source port and the peer's answers
// passed (by more than the reordering window, as declareInFlight). No ACK
// record of the new epoch reports those packets (spec section 6.3), and a
// tail probe of new data, once acknowledged, would only arm another: they
// would hold the window until it filled. Where the peer answered nothing
// sent after them, the probe asks it to. It reports whether it declared
// any.
func (p *sendPath) declarePassedEpochs() bool {
	start := p.EpochStart(p.Epoch())
	answered := p.s.peerAnswered()
	if p.oldest == p.next || !proto.SeqLess(p.oldest, start) || answered == 0 {
		return false
	}
	return p.declareSentBefore(answered, start)
}

// waitsForAnswers reports whether the peer's answers after a silence are
// still coming in (hear), and if so puts the path's tail probe or timeout
// off until they are: the packets they have not reported yet may be among
// them.
func (p *sendPath) waitsForAnswers() bool {
	due, coming := p.s.answersComing()
	if coming {
		p.timer.Reset(due)
	}
	return coming
}

// timeout is how long the path's timer waits from now. The transport
// decides.
func (p *sendPath) timeout() time.Duration { return p.s.c.tp.timeout(p) }

// probeTimeout is multipath's timeout. It is the tail-probe time while
// the path may probe (mayProbe), the probing interval of an ASSUMED_BAD
// path, and otherwise the retransmission timeout.
func (p *sendPath) probeTimeout() time.Duration {
	if rtt, borrowed := p.probeRTT(); rtt.Samples > 0 {
		cfg := &p.s.c.ep.cfg
		floor := cfg.RTOMin
		if p.s.hinted() {
			// The drain time keeps the probe behind the queue the packets
			// wait in. Without a hint nothing does, so the floor stays at
			// RTOMin. A floor of ProbeMin would resend packets that are
			// only late in an incast.
			floor = cfg.ProbeMin
		}
		late := p.s.c.ep.hostLate() // the host's scheduling delay (see adaptiveRTO)
		wait := max(2*rtt.SRTT+cfg.AckDelay, rtt.SRTT+p.probeDrain()+cfg.AckDelay, floor) + late
		if borrowed {
			wait *= 2 // as adaptiveRTO doubles a borrowed estimate
		}
		return min(wait, cfg.RTOMax)
	}
	if p.State() == pathmgr.AssumedBad {
		// Probing doubles the wait, but only up to BadProbeMax. What failed
		// may be repaired, and a probe is one small packet per path. It
		// does not double while no other path of the plane is in service
		// and the connection's random loss explains the probes that went
		// unanswered: the plane carries nothing until one is.
		if !p.planeServed() && p.s.loss.explains(int(p.timeouts)) {
			return p.rtoAfter(0)
		}
		return min(p.rto(), max(p.s.c.ep.cfg.BadProbeMax, p.rtoAfter(0)))
	}
	return p.rto()
}

// mayProbe reports whether the path's timer fires next for a tail probe
// (probeRTT).
func (p *sendPath) mayProbe() bool {
	rtt, _ := p.probeRTT()
	return rtt.Samples > 0
}

// probeRTT is the round trip that times the path's tail probe, or one with
// no samples where the path may not probe: it probed since its last
// acknowledgment, it is out of service, or it has no estimate (estimate).
// A path whose whole first window was lost, or whose ACK records were, has
// no sample of its own. Its packets hold their DSNs, and the rest of a
// message waits for them: a probe at its connection's estimate finds them
// lost, or only late, in a few round trips, where its retransmission
// timeout is twice its connection's and cuts its window.
//
// Not with a borrowed estimate after a first window of one BDP
// (FirstWindowBDP), once the connection heard an ACK, until a later packet
// overtook the path's oldest:
// N such windows overflow the queue they meet, a path without a sample
// most often lost its whole window there, and its probe, which waits only
// for the packets ahead of its own (probeDrain), would go into that queue
// while it is still full. A later packet acknowledged shows the queue let
// packets through again, and the path's own lost (docs/cc.md). Before any
// ACK nothing can overtake it, and the handshake's round trip times its
// probe (estimate).
func (p *sendPath) probeRTT() (rtt pathmgr.RTT, borrowed bool) {
	if p.probed || p.State() != pathmgr.Good && p.State() != pathmgr.Skip {
		return pathmgr.RTT{}, false
	}
	if rtt, borrowed = p.estimate(); borrowed && p.s.first > 0 && p.s.heard && !p.firstWindowOvertaken() {
		return pathmgr.RTT{}, false
	}
	return rtt, borrowed
}

// estimate is the RTT estimate the path's timers go by: its own, or for a
// path not yet sampled, once the receiver has granted a rate, its
// connection's slowest sampled path's (borrowed; slowestRTT). Before the
// first ACK of a connection that sent a first window of one BDP it is the
// handshake's round trip (borrowed): N such windows may overflow the queue
// they meet, and a connection whose whole window was lost there heard
// nothing that would time it, where RTOInitial holds the whole transfer.
// Without any of these it has no samples.
func (p *sendPath) estimate() (rtt pathmgr.RTT, borrowed bool) {
	if s := p.s; p.RTT.Samples == 0 && s.first > 0 && !s.heard && s.c.hsRTT > 0 {
		hs := s.c.hsRTT
		return pathmgr.RTT{SRTT: hs, RTTVar: hs / 2, Min: hs, Samples: 1}, true
	}
	if p.RTT.Samples > 0 || !p.s.hinted() {
		return p.RTT, false
	}
	rtt = p.s.slowestRTT()
	return rtt, rtt.Samples > 0
}

// timeUnsampled brings the timers of the paths not yet sampled forward to
// what their estimate now gives, once the connection has a hint and a
// sampled path to borrow from (estimate). They were armed before, at
// RTOInitial where nothing was to be borrowed, and a path whose first
// packets were lost would wait that long while its siblings carry on.
// It is called on a path's first sample and on the first hint, rarely.
func (s *sender) timeUnsampled() {
	if !s.hinted() {
		return
	}
	for _, p := range s.paths {
		if p.RTT.Samples == 0 && p.inflight > 0 {
			p.fireBy(p.due())
		}
	}
}

// timedOut counts a timeout in a row, saturating at what the count holds.
// The timeout reaches RTOMax long before that, and a connection without
// progress fails after Config.NoProgress.
func (p *sendPath) timedOut() {
	if p.timeouts < math.MaxUint8 {
		p.timeouts++
	}
}

// rto is the path's retransmission timeout, doubled per timeout in a row.
func (p *sendPath) rto() time.Duration { return p.rtoAfter(int(p.timeouts)) }

// rtoAfter is the retransmission timeout after timeouts in a row.
func (p *sendPath) rtoAfter(timeouts int) time.Duration { return p.s.c.tp.rto(p, timeouts) }

// adaptiveRTO is multipath's retransmission timeout after timeouts in a
// row. It comes from the path's RTT. A path with no sample yet uses its
// connection's slowest sampled path, doubled, once the receiver has granted
// a rate. The timeout never comes before the packets in flight could drain,
// and it doubles for each timeout in a row.
func (p *sendPath) adaptiveRTO(timeouts int) time.Duration {
	cfg := &p.s.c.ep.cfg
	rtt, borrowed := p.estimate()
	rto := rtt.RTO(cfg.RTOInitial, cfg.RTOMin, cfg.RTOMax)
	drain := p.s.drainTime()
	if p.firstWindowOvertaken() {
		drain = 0 // its packets are lost, not waiting (probeOvertaken)
	}
	rto = max(rto, rtt.SRTT+drain+p.s.c.ep.hostLate(), p.s.lateFloor())
	if borrowed {
		rto *= 2
	}
	for i := 0; i < timeouts && rto < cfg.RTOMax; i++ {
		rto *= 2
	}
	return min(rto, cfg.RTOMax)
}

// hostLate is how long the host may keep the engine from running: twice
// the longest delay its clock's events saw of late, if the clock knows it
// (clock.Scheduler). Twice, because the peer's host may be as busy and an
// ACK waits on both. A timer that came in under it would take the host's
// slowness for loss. It is 0 in virtual time.
func (e *Endpoint) hostLate() time.Duration {
	if e.sched == nil {
		return 0
	}
	return 2 * e.sched.Late()
}

// lateFloor is the floor that spurious timeouts set under the connection's
// retransmission timeouts: the longest round trip one of them revealed, and
// a quarter more, halved for each lateMemory since. A host that stalls the
// engine stalls all its paths alike, and an RTT estimate that forgot the
// last stall times out again at the next. It is 0 before any.
func (s *sender) lateFloor() time.Duration {
	if s.late == 0 {
		return 0
	}
	halvings := s.c.ep.clock.Now().Sub(s.lateAt) / lateMemory
	return (s.late + s.late/4) >> min(halvings, 62)
}

// sawLate records the round trip rtt that a spurious timeout revealed.
func (s *sender) sawLate(rtt time.Duration) {
	s.late, s.lateAt = max(s.lateFloor()*4/5, rtt), s.c.ep.clock.Now()
}

// hinted reports whether the receiver has granted a rate. The drain time,
// and the timers that depend on it, need one. The first hinted ACK lowers
// the hint from none, which puts every path's timer off (rearmTimer). A
// path not yet sampled goes by its connection's estimate once there is a
// hint and a sample: its timer is brought forward then (timeUnsampled).
func (s *sender) hinted() bool { return s.hint > 0 && !math.IsInf(s.hint, 1) }

// slowestRTT is the RTT estimate of the connection's sampled path with the
// largest smoothed RTT, or an estimate with no samples when no path has
// one.
//
// A path not yet sampled probes and times out by twice the times this
// gives, rather than by RTOInitial (estimate). Its connection's paths join
// the same two hosts. If
// its first packets were lost, the path would hold their DSNs, and soon the
// whole DSN window, for RTOInitial, which is hundreds of round trips of a
// data-center fabric. The factor of two is there because a first window
// waits behind every other connection's in the sending host's own queue,
// which no sample has measured yet.
func (s *sender) slowestRTT() pathmgr.RTT {
	var r pathmgr.RTT
	for _, p := range s.paths {
		if p.RTT.Samples > 0 && (r.Samples == 0 || p.RTT.SRTT > r.SRTT) {
			r = p.RTT
		}
	}
	return r
}

// leastRTTs is the least RTT and the least smoothed RTT of the
// connection's sampled paths, each over every such path, or zeros when no
// path has a sample.
func (s *sender) leastRTTs() (least, smoothed time.Duration) {
	for _, p := range s.paths {
		if p.RTT.Samples == 0 {
			continue
		}
		if least == 0 || p.RTT.Min < least {
			least = p.RTT.Min
		}
		if smoothed == 0 || p.RTT.SRTT < smoothed {
			smoothed = p.RTT.SRTT
		}
	}
	return least, smoothed
}

// drainTime is how long the receiver takes, at the rate it granted this
// connection, to take everything the connection has in flight. No packet is
// late before the packets sent with it could have been delivered (spec
// section 6.6).
//
// In an N:1 incast the first round trip puts N initial windows in one
// queue. An RTT sampled at the front of that queue says nothing of a packet
// at its back. A timer of twice that RTT would resend packets that are only
// waiting their turn, and the resends would wait in the same queue again.
// For a single sender at line rate the drain time is a fraction of a round
// trip and changes nothing. It is at most RTOMax, whatever hint a peer
// sends.
func (s *sender) drainTime() time.Duration { return s.drainFor(s.inflight()) }

// probeDrain is the drain time a tail probe waits for. It is the
// connection's whole drain time, except after a first window of one BDP
// (FirstWindowBDP): then only the packets the connection sent
// before the path's oldest in flight count, the ones a queue holds in
// front of it. New data takes DSNs in the order it is sent, so they are at
// most the DSNs between the oldest not acknowledged and its own. N first
// windows of a BDP each overflow the queue they meet, and what it did not
// hold is lost, not waiting; a path whose window is full of lost packets
// sends nothing new that would show them, so its probe must not wait for
// the whole window to drain at the connection's share. First windows of
// 16 packets fit the queues of the incasts measured, where the whole drain
// time keeps the probes behind them (docs/cc.md).
func (p *sendPath) probeDrain() time.Duration {
	s := p.s
	if s.first == 0 {
		return s.drainTime()
	}
	if p.oldest == p.next || p.firstWindowOvertaken() {
		return 0
	}
	ahead := p.slot(p.oldest).dsn - s.una
	return s.drainFor(int(min(uint32(s.inflight()), ahead)))
}

// firstWindowOvertaken reports whether the path, after a first window of
// one BDP and without an RTT sample of its own, had its oldest packet
// overtaken: it most likely lost its whole window, its packets are not
// waiting in a queue, and its timers wait for no drain.
func (p *sendPath) firstWindowOvertaken() bool {
	return p.s.first > 0 && p.RTT.Samples == 0 && p.overtaken()
}

// overtaken reports whether a transmission sent after the path's oldest in
// flight, by more than a reordering window, was reported received: the
// oldest is lost, not queued.
func (p *sendPath) overtaken() bool {
	return p.oldest != p.next && p.overtook(p.slot(p.oldest).sentAt)
}

// overtook reports whether a transmission sent on the path at sent was
// overtaken (overtaken). The reordering window is passedBy's, of the path
// or, for a path without an RTT sample, of the sampled path of its plane
// with the largest smoothed RTT: a plane of longer links delays every path
// on it, and the path may queue as long as its slowest sibling. With no
// path of its plane sampled, nothing is overtaken.
func (p *sendPath) overtook(sent clock.Time) bool {
	q := p.sampledOnPlane()
	return q != nil && p.s.passedBy(q, sent, p.s.deliveredSent)
}

// sampledOnPlane is the path whose reordering window overtook uses: the
// path itself once sampled, or else its plane's sampled path with the
// largest smoothed RTT, or nil.
func (p *sendPath) sampledOnPlane() *sendPath {
	if p.RTT.Samples > 0 {
		return p
	}
	var slowest *sendPath
	for _, q := range p.s.paths {
		if q.RTT.Samples > 0 && q.Plane() == p.Plane() && (slowest == nil || q.RTT.SRTT > slowest.RTT.SRTT) {
			slowest = q
		}
	}
	return slowest
}

// drainFor is drainTime for the given number of packets in flight.
func (s *sender) drainFor(packets int) time.Duration {
	if !s.hinted() {
		return 0
	}
	d := float64(packets) * s.mss / s.hint
	return time.Duration(min(d*float64(time.Second), float64(s.c.ep.cfg.RTOMax)))
}

func (c *Conn) onAckTimer() {
	if c.state != Established {
		return
	}
	if c.rcv.repeat {
		c.rcv.repeatAck()
	} else {
		c.rcv.ackNow()
	}
	c.ep.flush()
}

// madeProgress keeps the no-progress clock. The clock runs only while work
// is outstanding. It restarts only when the peer acknowledged something
// new, so that posting more work to a vanished peer does not keep the
// connection alive.
func (c *Conn) madeProgress(acked bool) {
	switch {
	case !c.snd.busy():
		c.progress.Stop()
	case acked || c.progress.Deadline() == clock.Never:
		c.progress.Reset(c.ep.clock.Now().Add(c.ep.cfg.NoProgress))
	}
}

func (c *Conn) onNoProgress() {
	if c.state == Closed || !c.snd.busy() {
		return
	}
	c.fail(ErrTimeout, StatusTimeout, true)
	c.ep.flush()
}

// onAlive watches the peer's liveness (spec section 8.6). A connection
// that has heard nothing from its peer for KeepAlive sends a keep-alive
// PROBE, and again each KeepAlive after that. One that has heard nothing
// for NoProgress declares the peer dead, whether or not it has work
// outstanding: a peer that crashed says nothing more, and a connection
// that only receives would otherwise wait for it forever. Every packet
// the peer sends counts, so a busy connection never probes; the timer
// reads when the last one came rather than being reset by each.
func (c *Conn) onAlive() {
	if c.state != Established {
		return
	}
	cfg := &c.ep.cfg
	now := c.ep.clock.Now()
	quiet := now.Sub(c.heard)
	if quiet >= cfg.NoProgress {
		c.fail(fmt.Errorf("%w: nothing heard from it for %v", ErrTimeout, quiet), StatusTimeout, true)
		c.ep.flush()
		return
	}
	next := c.heard.Add(cfg.KeepAlive)
	if quiet >= cfg.KeepAlive {
		c.sendKeepAlive()
		c.ep.flush()
		next = now.Add(cfg.KeepAlive)
	}
	c.alive.Reset(min(next, c.heard.Add(cfg.NoProgress)))
}
