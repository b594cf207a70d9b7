// Loss recovery beyond the selective acks. This file holds the retransmit
// queue, tail probes, retransmission timeouts and copies at the tail (spec
// section 6.6).

package engine

import (
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

func (s *sender) popRetx() {
	s.retxHead++
	switch {
	case s.retxHead == len(s.retx): // empty, so start over and keep the capacity
		s.retx, s.retxHead = s.retx[:0], 0
	case s.retxHead > 64 && 2*s.retxHead > len(s.retx):
		n := copy(s.retx, s.retx[s.retxHead:])
		s.retx, s.retxHead = s.retx[:n], 0
	}
}

// tailProbe sends one packet on the path, whatever its window, with AR
// set, so that the receiver reports what the path delivered (spec section
// 6.6).
// The packet is new data where the path may carry some (newForProbe), as
// RFC 8985 section 7.3 has it: its report shows the path's losses as well
// as a resend's would, and where nothing was lost, only the report was
// late, it duplicates nothing. Otherwise it resends the path's newest
// unresolved packet; only such probes count as TailProbes, which are
// retransmissions.
func (p *sendPath) tailProbe() {
	s := p.s
	p.probed = true
	dsn, d := s.newForProbe(p)
	resend := d == nil
	if resend {
		for psn := p.next - 1; psn != p.oldest-1 && d == nil; psn-- {
			r := p.slot(psn)
			if r.resolved {
				continue
			}
			if rec := s.record(r.dsn); rec != nil && !rec.acked && !rec.waiting && p.ringRoom() {
				dsn, d = r.dsn, rec
			}
		}
		if d == nil {
			return
		}
		s.stats.TailProbes++
		p.Counters.TailProbes++
	}
	s.transmit(dsn, d, p, resend, true)
	if !resend {
		s.paced(int(d.n))
	}
	if s.unsent == 0 {
		// Nothing follows the probe. If it were lost, only the
		// retransmission timeout would be left to find out. So copies
		// go on other planes, or on its own (copyAtTail). The paths'
		// next probes are then brought forward by the tail's margin, as
		// after a resend, the copy's path among them: its own timer runs
		// from a smoothed RTT that still holds the queues of the busy
		// part of the transfer.
		s.copyAtTail(dsn, d, p, -1, true)
		s.probeOverdue(s.c.ep.clock.Now())
	}
}

// onRTO declares lost, to be resent on other paths, what is unresolved on
// the path and was sent before something the peer answered, unless the
// peer is quiet (peerQuiet); before the peer answered anything, or where
// failed, since the path is known to have failed (lostAtTail), all of it.
// The path goes to ASSUMED_BAD and takes no new data (spec section 6.4).
// It is probed until a probe or an acknowledgment shows it works. An
// unanswered probe repaths it, where a new route can help. What the
// timeout saw in flight is remembered, in case an ACK shows that it was
// only late (lateDelivery).
//
// The last path in service on its plane stays in service, with its window,
// when the connection's random loss explains its silence (randomLoss.explains): out
// of service, the plane would carry nothing until a probe came back, and
// under heavy loss a probe and its reply both arrive less than half the
// time. Random loss is not congestion, nor a failure. A plane that failed
// goes on being silent, and the path leaves service once its silence is
// more than the loss explains.
func (p *sendPath) onRTO(failed bool) {
	s := p.s
	if !p.lastTimeout.open || p.lastTimeout.epoch != p.Epoch() {
		p.lastTimeout.from, p.lastTimeout.epoch, p.lastTimeout.window = p.oldest, p.Epoch(), p.cwin.Value()
	}
	p.lastTimeout.open, p.lastTimeout.to = true, p.next
	p.lostSince = p.slot(p.oldest).sentAt
	stays := !p.planeServed() && s.loss.explains(p.silent)
	if !stays {
		p.cwin.OnTimeout() // this path's window only
		p.windowChanged()
		p.timedOut()
	}
	p.Counters.Timeouts++
	s.stats.Timeouts++
	switch answered := s.peerAnswered(); {
	case answered == 0:
		// Nothing sent has been answered yet, so nothing tells late from
		// lost, and a first window lost whole in an incast's queue is
		// lost. The handshake's ACK, on the side that accepted the
		// connection, answers nothing it sent.
		p.declareInFlight(clock.Never)
	case s.peerQuiet(p):
		s.quietTimedOutAt = s.c.ep.clock.Now()
		if !p.declareOutlived() {
			s.declareOldestOnce(p, s.c.heard)
		}
	case failed:
		p.declareInFlight(clock.Never)
	case !p.declareInFlight(answered):
		// The peer answered nothing sent after the path's packets: its
		// answers may be those it sent before it stalled, late in a
		// queue, and what the path sent since waits in its socket. As
		// while it is quiet, one packet goes again for the silence; the
		// rest go once the peer answers something sent after them
		// (expired).
		s.declareOldestOnce(p, s.c.heard)
	}
	p.timedOutAt = s.c.ep.clock.Now()
	if stays {
		p.probed = false // its next silence starts with a tail probe
		return
	}
	p.TimedOut()
	p.sendProbe()
}

// declareInFlight declares lost, to be resent on other paths, the path's
// packets in flight sent before by, by more than overtook's reordering
// window (none without a sampled path on its plane); by clock.Never, all
// of them. It reports whether it declared any.
func (p *sendPath) declareInFlight(by clock.Time) bool {
	return p.declareSentBefore(by, p.next)
}

// declareSentBefore is declareInFlight for the packets in flight before
// PSN end.
func (p *sendPath) declareSentBefore(by clock.Time, end uint32) bool {
	before := by
	if q := p.sampledOnPlane(); q != nil && by != clock.Never {
		before = by.Add(-p.s.reorderWindow(q))
	}
	declared := false
	for psn := p.oldest; psn != end; psn++ {
		if r := p.slot(psn); !r.resolved && r.sentAt < before {
			p.resolveLost(r, psn, LossTimeout)
			declared = true
		}
	}
	p.advance()
	return declared
}

// declareOutlived declares lost what outlived the path's last timeout,
// once the peer answered something sent at or after it, such as that
// timeout's resend (peerQuiet). It reports whether it declared any.
func (p *sendPath) declareOutlived() bool {
	last := p.timedOutAt
	return last != 0 && p.s.peerAnswered() >= last && p.declareInFlight(last)
}

// declareOldest declares the path's oldest packet in flight lost.
func (p *sendPath) declareOldest() {
	for psn := p.oldest; psn != p.next; psn++ {
		if r := p.slot(psn); !r.resolved {
			p.resolveLost(r, psn, LossTimeout)
			break
		}
	}
	p.advance()
}

// peerQuiet reports whether the peer, heard before, has sent nothing for
// half the path's retransmission timeout: while data reaches it, it answers
// within an ACK's delay, and its answers to a working path come within a
// round trip, so the silence is not the timed-out path's alone.
//
// A peer whose host does not run it for a while (a busy machine) answers
// nothing on any path, and every path times out though nothing was lost.
// Resending each path's window would put it behind the same stall, to be
// found spurious when the host runs again. So while the peer is quiet
// only the first timeout of the silence declares a packet lost, the path's
// oldest (declareOldestOnce), as TCP's timeout resends its oldest segment
// (RFC 6298 section 5.4). The answers that came before the silence do not
// tell what the path's other packets met: one plane's queue may hold a
// packet past a later one of another plane's by more than a round trip,
// and at its timeout, which came early for the stall, it waits in the
// peer's socket. Packets that outlived the path's previous timeout, while
// the peer answered something sent after it, such as that timeout's
// resend, are lost: a connection whose last packets were all lost resends
// them at the pace of its answers, not one a timeout. The path's ACKs
// settle the rest once the peer answers, or its next timer declares them
// lost once the peer answered something sent after them (expired).
// When the peer speaks again, its answers to every path come in a burst,
// and what they pass in between is not lost: a tail probe or timeout that
// falls due before they are in waits for them (hear).
//
// A path that fails while others carry hears their answers all along. A
// plane that failed under every path of a connection is told from a
// stalled peer by the plane probes, which the peer answers on another
// plane (probePlanes), and a path that leaves its plane out of service
// declares lost what it left in flight there (leftPlane). Before
// the first ACK nothing is quiet: a first window lost whole in an
// incast's queue is lost, not late (estimate).
func (s *sender) peerQuiet(p *sendPath) bool {
	return s.heard && s.c.ep.clock.Now().Sub(s.c.heard) > p.rtoAfter(0)/2
}

// hear notes a packet from the peer at at, the one before it having come
// at last. One that ends a silence in which a timeout found the peer quiet
// (peerQuiet) sets when the rest of its answers are in: half the longest
// retransmission timeout, undoubled, of the paths with packets in flight,
// taken before the burst's late ACKs raise the timeouts' floor
// (lateFloor). Until then the tail probes and timeouts of the paths in
// service wait (waitsForAnswers), and so does what the probes of paths
// out of service declare (expired): on a host that did not run either,
// their timers fire with the first answers, a reply to their newest
// probe among them. Then each path in service looks at its packets in
// flight, rather than at its timer doubled by the silence: what the
// answers did not report, after a silence that may have been a blackout,
// is lost.
func (s *sender) hear(last, at clock.Time) {
	if s.quietTimedOutAt <= last {
		return
	}
	var wait time.Duration
	for _, p := range s.paths {
		if p.State() != pathmgr.Down && p.inflight > 0 {
			wait = max(wait, p.rtoAfter(0)/2)
		}
	}
	s.answersDue = at.Add(wait)
	for _, p := range s.paths {
		if p.InUse() && p.inflight > 0 {
			p.fireBy(s.answersDue)
		}
	}
}

// answersComing returns when the peer's answers after its latest silence
// are in (hear), and whether that is still to come.
func (s *sender) answersComing() (due clock.Time, coming bool) {
	return s.answersDue, s.c.ep.clock.Now() < s.answersDue
}

// declareOldestOnce declares the path's oldest packet in flight lost, if
// no timeout did so since the peer was last heard at heard, before its
// silence (peerQuiet).
func (s *sender) declareOldestOnce(p *sendPath, heard clock.Time) {
	if s.resentInSilenceFrom == heard {
		return
	}
	s.resentInSilenceFrom = heard
	p.declareOldest()
}

// peerAnswered is the send time of the newest transmission or PROBE the
// peer answered.
func (s *sender) peerAnswered() clock.Time { return max(s.deliveredSent, s.probeAnswered) }

// settleMoot resolves the path's packets in flight whose DSN another
// transmission delivered, such as a probe's copy on another plane or a
// resend. It does not count them lost. No report of them matters any more,
// and a timeout for them would cut a working path's window to one packet.
func (p *sendPath) settleMoot() {
	for psn := p.oldest; psn != p.next; psn++ {
		r := p.slot(psn)
		if r.resolved || r.psn != psn {
			continue
		}
		p.settleIfMoot(r)
	}
	p.advance()
}

// settleIfMoot settles the transmission r, not counting it lost, when
// another transmission delivered its DSN (settleMoot). It reports whether
// it did.
func (p *sendPath) settleIfMoot(r *sendRec) bool {
	if d := p.s.record(r.dsn); d != nil && !d.acked {
		return false
	}
	r.resolved = true
	p.released(r)
	return true
}

// copyAtTail sends DSN dsn, sent on path p with nothing new behind it (at
// the tail, or at the head of a full window), as many times more as the
// connection's random loss asks (tailCopies), each
// copy on a path of another plane and the copies on planes of their own
// while there are enough. A plane's losses come together, from a burst on
// one of its links or a link failing. Where no other plane has room, the
// copies go on p's own plane, on paths whose route reads clear, p itself
// last: a connection on one plane loses at random too, and its tail would
// wait out a timeout per round.
func (s *sender) copyAtTail(dsn uint32, d *dsnRecord, p *sendPath, avoid int, probe bool) {
	var used uint64 // the planes the copies took, the first 64 of them
	for range s.loss.tailCopies() {
		q := s.pathForCopy(p, avoid, used)
		if q == nil {
			return
		}
		s.transmit(dsn, d, q, true, probe)
		s.stats.Copies++
		q.Counters.Copies++
		q.fireBy(s.c.ep.clock.Now().Add(q.timeout())) // the copy is q's newest packet
		if q.Plane() < 64 {
			used |= 1 << q.Plane()
		}
	}
}

// pathForCopy returns the path that takes a copy of a transmission path p
// sent, or nil if none has room. A window under one packet does not hold a
// copy back for its gap (sendPath.spaced): a copy goes once, at the tail
// or the window's head, and waiting out the gap would delay what the copy
// is there to hasten. The receiver takes whichever copy comes
// first and counts the other as a duplicate (spec section 6.6). The sender
// settles the transmission the other one delivered without counting a loss
// (see settleMoot). A path of another plane comes first: of a plane other
// than avoid, where the DSN was lost, and than those in used, which other
// copies took, then of any other plane. Failing those, a path of p's own
// plane, p itself last, whose latest reading of its current route queues
// less than clearRoom: loss behind a queue is that queue's overflow, and
// a copy would add to it. An avoid of -1 avoids no plane.
func (s *sender) pathForCopy(p *sendPath, avoid int, used uint64) *sendPath {
	const shunning, otherPlanes, ownPlane = 0, 1, 2
	now := s.c.ep.clock.Now()
	n := len(s.paths)
	for pass := shunning; pass <= ownPlane; pass++ {
		for i := 1; i <= n; i++ {
			q := s.paths[(int(p.ID())+i)%n] // p itself at i == n
			plane := q.Plane()
			if (plane == p.Plane()) != (pass == ownPlane) || !s.carries(q, now, true) || !q.roomy() {
				continue
			}
			if pass == shunning && (plane == avoid || plane < 64 && used&(1<<plane) != 0) {
				continue
			}
			if pass == ownPlane && (!q.queued || q.queue >= q.clearRoom()) {
				continue
			}
			return q
		}
	}
	return nil
}

// copyHead sends the oldest DSN not acknowledged once more, as the tail's
// copies go (copyAtTail), as many times as the connection's random loss asks
// (tailCopies). It does so when half of the receive window waits behind
// that DSN and its latest transmission is overdue. A burst can take a
// packet and its resend together. Lost twice, the DSN would hold the whole
// connection once the window filled, for as long as its path took to find
// out. Each transmission is copied at most once: a copy is the DSN's
// latest transmission, which is overdue only later.
//
// The transmission is overdue after the margin of a tail probe, once a
// packet sent after it passed it (passedBy). Its own path finds a loss only
// from a later packet of its own, or from its timer; a connection of many
// paths sends each one a packet every few round trips, and under heavy
// loss those are lost too (docs/cc.md, "Resends go to another plane").
// Without that evidence the copy also waits out the drain time, as a probe
// does: in an incast, a packet at the back of the queue is not late.
func (s *sender) copyHead(now clock.Time) {
	r := s.record(s.una)
	if s.c.state != Established || r == nil || r.acked || r.queued || r.waiting || int(r.path) >= len(s.paths) {
		return // an ACK's completion may have closed the connection
	}
	p := s.paths[r.path]
	latest := p.slot(r.psn)
	if latest.psn != r.psn || latest.resolved {
		return
	}
	head := headMark{dsn: s.una, path: r.path, psn: r.psn, acked: s.newestAcked}
	if seen := s.headSeen; seen.dsn == head.dsn && seen.path == head.path && seen.psn == head.psn {
		head.acked = max(head.acked, seen.acked)
	}
	s.headSeen = head
	due := latest.sentAt.Add(s.overdueMargin(p) + s.c.ep.cfg.AckDelay)
	if !s.passedBy(p, latest.sentAt, head.acked) {
		due = due.Add(s.drainTime())
	}
	if now < due {
		// With the receive window full no ACK may come to find it due, so
		// the head's timer does.
		if due < s.headT.Deadline() {
			s.headT.Reset(due)
		}
		return
	}
	// A full window sends nothing new behind the head, as at the tail, so
	// it gets the tail's copies (docs/cc.md, "Copy of the DSN holding the
	// window").
	s.copyAtTail(s.una, r, p, -1, false)
}

// headMark names one transmission of a DSN, its path and PSN there, and
// the send time of the newest transmission reported received since.
type headMark struct {
	dsn   uint32
	path  uint8
	psn   uint32
	acked clock.Time
}

// onHeadTimer checks the head of the receive window again when its copy
// came due (copyHead).
func (s *sender) onHeadTimer() {
	if s.c.state != Established {
		return
	}
	s.c.tp.overdue(s, s.c.ep.clock.Now())
	s.c.ep.flush()
}

// passedBy reports whether a transmission sent at acked, reported
// received, was sent more than a reordering window after time sent, when
// path p sent the transmission in question. The window is a quarter of the
// newest round trip, as RACK's (RFC 8985), plus what p's round trip
// exceeds the connection's shortest by: in least RTT for a longer route,
// in smoothed RTT for a longer queue, such as a slower plane's.
func (s *sender) passedBy(p *sendPath, sent, acked clock.Time) bool {
	if acked == 0 || p.RTT.Samples == 0 {
		return false
	}
	return acked > sent.Add(s.reorderWindow(p))
}

// reorderWindow is passedBy's reordering window for a transmission on the
// sampled path p.
func (s *sender) reorderWindow(p *sendPath) time.Duration {
	least, smoothed := s.leastRTTs()
	return max(p.RTT.Min-least, p.RTT.SRTT-smoothed) + s.newestRTT/4
}

// probeOverdue brings forward the tail probes of a connection with nothing
// new to send.
//
// Nothing follows a lost last packet on its path. The path's timer is twice
// a smoothed RTT, which a busy fabric's queues inflate, and it runs from
// the path's last ACK. That ACK came a window of packets before the lost
// one was sent. So the timer alone finds the loss late.
//
// Here a path's oldest packet in flight is overdue some margin after it was
// sent. The margin is the longer of two round trips, plus half of it. One
// is the round trip of the newest packet an ACK reported received on any
// path, which is how long a round trip takes now. The other is the path's
// own smoothed RTT. The half is at least ProbeMin, since the planes' queues
// differ most at the tail. The drain time comes on top, because an incast's
// packets wait their turn in one queue.
//
// Once no more than tailPackets are in flight, the margin is the newest
// round trip plus ProbeMin. The path's smoothed RTT still remembers the
// queues of the busy part of the transfer, and the extra half round trip
// allows for how much the planes' queues could differ then. Waiting out
// either costs the completion more than an early probe costs the network,
// which is a packet and its copy.
//
// Without a receiver's hint there is no drain time to wait for, and the
// tail's own queue can hold a packet past the margin. The path's timer
// alone decides then, as it always does in the baseline, whose ACKs carry
// no hint. probeOverdue runs on ACKs, after resends and tail probes, and
// when the hint falls.
func (s *sender) probeOverdue(now clock.Time) {
	if s.unsent != 0 || s.newestRTT == 0 || !s.hinted() {
		return
	}
	cfg := &s.c.ep.cfg
	inflight := s.inflight()
	d := s.drainFor(inflight)
	last := inflight <= tailPackets
	for _, p := range s.paths {
		if p.inflight == 0 || p.probed || p.State() != pathmgr.Good && p.State() != pathmgr.Skip {
			continue
		}
		margin := s.overdueMargin(p)
		if last {
			// Never before the path's own shortest round trip. A slower
			// plane's packet is not late by a faster plane's RTT.
			margin = max(s.newestRTT, p.RTT.Min) + cfg.ProbeMin + s.c.ep.hostLate()
		}
		sent := p.slot(p.oldest).sentAt
		p.fireBy(max(sent.Add(margin+d+cfg.AckDelay), now))
	}
}

// lostOvertaken declares lost, to be resent, the packets of a first window
// of one BDP that a later packet overtook (overtook), as RACK does (RFC
// 8985). The sender calls it while the receiver is the bottleneck
// (receiverBound): N such windows overflow the receiver's queue, and what
// it did not hold is lost. A path finds its losses from a later packet of
// its own, but the first window fills the path's window with them and it
// sends nothing more; its probe waits two of its round trips, which the
// queue lengthened, and meanwhile those packets hold the windows and the
// receiver's link goes short. Only the first window's packets: later, a
// path's own ACK records find its losses. Only where the receiver is the
// bottleneck: every path meets in its queue, where a later packet does not
// pass an earlier one, while routes that queue differently reorder more
// than the window allows.
func (s *sender) lostOvertaken(now clock.Time) {
	for _, p := range s.paths {
		p.declareOvertaken(now, true, 0)
	}
}

// lostAtTail declares lost, at the tail of a transfer, the packets of a
// path in service that a transmission sent later on another path overtook
// (overtook). Before the tail a path's own later packets find its losses;
// at the tail nothing follows its last packets.
//
// A path that sent its tail probe declares them whatever the connection's
// loss: the probe and what it was to report were lost together, as when a
// burst on the path's plane takes them, while the probe's copy on another
// plane arrived. A path that sent none declares them only while the
// connection's ACK records show it losing tailLossRate of its packets or
// more (randomLoss.atRandom). Its probe would come a probe timeout after
// its last ACK, a timeout the busy part of the transfer's queues
// lengthened, and under heavy loss the probe and its copy are often lost
// in turn. Where little is lost, routes whose queues differ reorder the
// tail by more than the reordering window, and a packet overtaken there is
// late, not lost. Its window takes in the host's scheduling delay too.
//
// A path whose packets were so declared at two tails with no news of it
// in between (a record that resolved one of its packets, or whose newest
// PSN, reported received, was declared lost) has failed, not lost a
// burst: it times out (onRTO) and leaves service, as its timer, which the
// declarations leave nothing to time, would have had it. A second tail
// declares a packet sent after the first tail's declaration; the rest of
// a burst of late ACKs only completes the first. Nothing is declared
// while the peer's answers after a silence are still coming (hear), and
// only when a newer transmission than before was reported received. A
// transport that resends from the PSN its receiver names (the baseline)
// declares nothing here (docs/cc.md, "The tail, across paths").
func (s *sender) lostAtTail(now clock.Time) {
	if s.unsent != 0 || tailOvertakenOff || !s.c.tp.gapsLost() || s.deliveredSent == s.tailSeen {
		return
	}
	s.tailSeen = s.deliveredSent
	if _, coming := s.answersComing(); coming {
		return
	}
	unprobed := s.loss.atRandom() && !tailProbedOnly
	// A packet stamped before another may leave its host after it by the
	// host's scheduling delay: without a probe's evidence, the window of a
	// path that sent none takes that in.
	unprobedLate := s.c.ep.hostLate()
	for _, p := range s.paths {
		if p.inflight == 0 || p.State() != pathmgr.Good && p.State() != pathmgr.Skip || !p.probed && !unprobed {
			continue
		}
		late := unprobedLate
		if p.probed {
			late = 0
		}
		declared, newest := p.declareOvertaken(now, false, late)
		if !declared || p.tailStrikes > 0 && newest <= p.struckAt {
			// Nothing declared, or only what the last tail had sent: a
			// burst of late ACKs, each reporting a newer transmission,
			// declares one tail's packets a few at a time.
			continue
		}
		p.struckAt = now
		if p.tailStrikes++; p.tailStrikes >= 2 {
			p.onRTO(true)
			p.armTimer(now)
		}
	}
}

// tailOvertakenOff turns lostAtTail off, for the tests that compare with
// it or need a path's timeout at the tail.
var tailOvertakenOff bool

// tailProbedOnly restores, for the tests that measure it, lostAtTail as it
// was before: only a path that sent its tail probe declares its packets.
var tailProbedOnly bool

// declareOvertaken declares lost the path's oldest packets in flight that
// a later transmission overtook (overtook), sent more than late after them
// besides the reordering window, up to the first that none did; of its
// first window only if first. A packet of an earlier epoch is left
// to the timeout, as its ACK records leave it (spec section 6.3), and one
// whose DSN another transmission delivered is settled, not lost
// (settleMoot). It reports whether it declared any lost, and when the
// newest of those was sent.
func (p *sendPath) declareOvertaken(now clock.Time, first bool, late time.Duration) (declared bool, newest clock.Time) {
	found := false
	for p.oldest != p.next {
		psn := p.oldest
		r := p.slot(psn)
		if r.psn != psn || r.resolved || first && !r.first || proto.SeqLess(psn, p.EpochStart(p.Epoch())) || !p.overtook(r.sentAt.Add(late)) {
			break
		}
		if !p.settleIfMoot(r) {
			declared, newest = true, r.sentAt
			p.resolveLost(r, psn, LossOvertaken)
		}
		p.advance()
		found = true
	}
	if found {
		p.armTimer(now)
	}
	return declared, newest
}

// probeOvertaken brings forward the tail probe of each path without an RTT
// sample whose oldest packet a later one overtook (overtaken), after a
// first window of one BDP. N such windows overflow the queue they meet; a
// path that lost its whole window sends nothing that would show it, and
// its retransmission timeout waits for every packet the connection has in
// flight to drain at its share, most of which the queue dropped.
func (s *sender) probeOvertaken(now clock.Time) {
	for _, p := range s.paths {
		if p.inflight > 0 && p.firstWindowOvertaken() && p.mayProbe() {
			p.fireBy(now.Add(p.timeout()))
		}
	}
}

// overdueMargin is how long after it was sent a packet on path p is
// overdue. It is the longer of the newest round trip and the path's
// smoothed RTT, plus half of it, plus the host's scheduling delay
// (hostLate). The half is at least ProbeMin, since the planes' queues can
// differ by that much.
func (s *sender) overdueMargin(p *sendPath) time.Duration {
	late := func(rtt time.Duration) time.Duration { return rtt + max(rtt/2, s.c.ep.cfg.ProbeMin) }
	return max(late(s.newestRTT), late(p.RTT.SRTT)) + s.c.ep.hostLate()
}
