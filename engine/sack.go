// The scoreboard. It applies an ACK's cumulative DSN and its per-path
// selective-ack records (spec sections 5.5 and 6.6).

package engine

import (
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/proto"
)

// onAck processes an ACK. It applies the cumulative DSN first, then each
// path record.
func (s *sender) onAck(pkt *proto.Packet, at clock.Time) {
	ack := pkt.Ack()
	if cum := ack.CumDSN(); proto.SeqLess(s.nextDSN, cum) {
		// It acknowledges DSNs never sent. Obeying it would drop data in
		// flight as delivered, so the whole ACK is dropped and counted.
		s.stats.BadAcks++
		return
	}
	before := s.una
	s.heard = true
	wasHinted := s.hinted()
	lower := s.c.tp.hint(s, ack.RateHint()) // true when the receiver's share fell
	if !wasHinted && s.hinted() {
		s.timeUnsampled() // the paths not yet sampled may borrow now
	}
	if s.c.credits {
		s.takeCredit(ack.CreditStream(), ack.CreditLimit())
	}
	s.newestAcked = 0
	cum := ack.CumDSN()
	for s.una != s.nextDSN && proto.SeqLess(s.una, cum) {
		s.ackDSN(s.una)
	}
	if ack.RecordCount() > 0 {
		s.equip() // records name paths, which must exist to be checked and counted
	}
	for i := 0; i < int(ack.RecordCount()); i++ {
		rec := pkt.AckRecord(i)
		if int(rec.PathID()) >= len(s.paths) {
			s.stats.BadAcks++
			continue
		}
		s.paths[rec.PathID()].onRecord(rec, pkt.Common.Timestamp(), at)
	}
	if lower {
		// What is still in flight now drains more slowly (see drainTime),
		// and the paths' timers, armed at the old share, are put off
		// (rearmTimer).
		for _, p := range s.paths {
			if p.inflight > 0 {
				p.rearmTimer()
			}
		}
	}
	if s.newestAcked > 0 && s.first > 0 {
		if s.receiverBound() {
			s.lostOvertaken(at)
		}
		s.probeOvertaken(at)
	}
	if s.newestAcked > 0 {
		s.lostAtTail(at)
	}
	if s.newestAcked > 0 || lower {
		s.probeOverdue(at) // also after a fall of the hint, which may have put the timers off
	}
	s.sampleDelivery(at)
	s.c.tp.acked(s)
	if s.una != before {
		s.c.madeProgress(true)
	}
	s.pump()
	s.c.tp.overdue(s, at)
}

// onRecord applies one ACK record to its path. It takes an RTT sample, a
// one-way delay sample and the CE count, and resolves every PSN the record
// covers (spec section 5.5). ackSent is the ACK's Timestamp.
func (p *sendPath) onRecord(rec proto.AckRecord, ackSent uint32, at clock.Time) {
	s := p.s
	h, e := rec.HighestPSN(), rec.Epoch()
	if !proto.SeqLess(h, p.next) || proto.SeqLess(h, p.EpochStart(e)) {
		s.stats.BadAcks++ // never sent, or an older use of this epoch value
		return
	}
	if r := p.slot(h); r.psn == h && r.declared && e == p.Epoch() {
		// The record's newest PSN was declared lost and arrived: the path
		// delivers, and the tails that declared its packets took late ones
		// for lost (lostAtTail). Once only: a repeat of the record tells
		// nothing newer, and a dead path's receiver repeats its last.
		p.tailStrikes = 0
		r.declared = false
	}
	// A record that reports its newest PSN received for the first time
	// measures a round trip (spec section 5.5). A repeat measures the same
	// one again, over a longer ServiceTime, which the receiver's clock
	// counted: taken only while that is short, since the two clocks drift
	// apart over it, and the record of a path idle for seconds carries one
	// saturated at 2^32-1 ns.
	sample := uint32(at) - rec.EchoTimestamp() - rec.ServiceTime()
	first := p.unresolved(h) != nil
	sampled := (first || rec.ServiceTime() < repeatSampleMax) && sample < 1<<31 // else the echo is from the future: no sample
	// A late record of the plane a path left measured that plane, and its
	// round trip starts afresh on the new one (pathmgr.Path.Move).
	onPlane := p.sentSince(rec.EchoTimestamp(), p.PlaneSince(), at)
	if sampled && onPlane {
		p.rttSample(time.Duration(sample))
	}
	marked := 0
	if d := rec.CECount() - p.ce; d != 0 && d < 1<<31 {
		marked = int(d)
		p.Counters.CEMarks += uint64(d)
		p.ce = rec.CECount()
		if onPlane {
			s.c.ep.marking[p.Plane()] = true
		}
	}
	// The queue read is the route's the record's echo went on. After a
	// move to a new source port (spec section 6.3) a late record of the
	// old route tells nothing of the new one, nor does a record of the new
	// epoch whose echo is a late packet of the old route's: the receiver
	// echoes the latest arrival's timestamp (section 5.5).
	onRoute := sampled && e == p.Epoch() && p.sentSince(rec.EchoTimestamp(), p.RepathedAt(), at)
	if onRoute {
		p.queue, p.queued = p.oneWayQueue(rec, ackSent), true
	}
	if marked > 0 {
		p.markedAt = at
		if onRoute {
			p.markQueue = max(p.queue, 1) // a mark that read no queue leaves no room (routeClear)
		}
	}
	if s.c.ep.marking[p.Plane()] {
		// A plane that marked once takes no delay signal again, so its
		// delay base is no longer read or kept.
		p.cwin.NoDelay() // samples taken before the plane's first mark included
	} else if onRoute {
		p.cwin.OnDelay(p.delayQueue(rec, ackSent), time.Duration(sample), p.RTT.Min+s.c.ep.hostLate()) // hostLate: see the timeouts' H (docs/cc.md)
	}
	if sampled && onPlane {
		s.fitLongPlane(p.Plane()) // after the record's marks and queue are read
	}
	if p.lastTimeout.open && e == p.lastTimeout.epoch {
		p.lateDelivery(rec, h, at)
	}
	es := p.EpochStart(e)
	resolved := false
	ackedBefore := p.Counters.Acked
	var gotten, missed, runs int // this record's verdicts, for the loss measurement
	var lastMissed uint32        // the PSN of the latest loss, for its runs
	for psn := p.oldest; proto.SeqLessEq(psn, h); psn++ {
		r := p.slot(psn)
		if r.resolved || r.psn != psn || proto.SeqLess(psn, es) {
			continue // done, or sent in an earlier epoch; only a timeout resolves it (spec section 6.3)
		}
		k := h - 1 - psn
		switch {
		case psn == h || k < 256 && rec.Received(int(k)):
			p.resolveAcked(r, at)
			gotten++
		case !s.c.tp.gapsLost():
			continue // left for a resend from the PSN the receiver names
		default:
			p.resolveLost(r, psn, LossGap)
			if missed == 0 || psn != lastMissed+1 {
				runs++
			}
			missed++
			lastMissed = psn
		}
		resolved = true
	}
	p.advance()
	grant := s.c.ep.marking[p.Plane()] && (s.granted() || marked == 0 && (p.relieves(at) || p.routeClear(onRoute, at)))
	p.cwin.Grant(grant)
	p.cwin.Hold(marked == 0 && !grant && p.holdsGrowth()) // read only where additive increase may follow
	if p.cwin.OnAck(int(p.Counters.Acked-ackedBefore), marked, h, p.next) {
		p.Counters.DelayCuts++
	}
	// Read after the record's cuts, which a window held to whole packets
	// takes no lower than one: one that fell under a packet where it should
	// not is raised back.
	p.cwin.WholePackets(!s.subPacketWindows())
	p.windowChanged()
	if resolved {
		p.probed, p.timeouts, p.silent, p.tailStrikes = false, 0, 0, 0
		p.Delivered()
		p.armTimer(at)
		p.checkLoss(at, gotten, missed)
		s.loss.add(gotten, missed, runs)
		s.seekShorterPlane(p, at)
	}
	// A CE mark holds the path in SKIP for a round trip, where it carries
	// less new data (spec section 6.4; pickPath). The next clean record
	// brings the path back.
	if marked > 0 {
		p.Marked(at, max(p.RTT.SRTT, p.s.c.ep.cfg.AckDelay))
	} else if resolved {
		p.Clean()
	}
}

// oneWayQueue is the queueing delay an ACK record shows on the path's way
// to the receiver, over the least of its plane's readings (cc.DelayBase).
// The ACK left ServiceTime after the packet it echoes arrived, so the
// receiver's clock read ackSent - ServiceTime at that arrival, and less
// the echoed Timestamp it is the one-way delay plus the clocks' offset.
// The queue on the way there is the sender's to answer. The ACK's way
// back, which an RTT would count too, may wait behind the receiver's own
// data.
func (p *sendPath) oneWayQueue(rec proto.AckRecord, ackSent uint32) time.Duration {
	return p.s.oneWay[p.Plane()].Queue(oneWayReading(rec, ackSent))
}

// delayQueue is the same queueing delay over the delay signal's base,
// which the handshake's reading seeds (sender.delayBase).
func (p *sendPath) delayQueue(rec proto.AckRecord, ackSent uint32) time.Duration {
	return p.s.delayBase[p.Plane()].Queue(oneWayReading(rec, ackSent))
}

// oneWayReading is the one-way delay of the packet an ACK record echoes,
// plus the clocks' offset.
func oneWayReading(rec proto.AckRecord, ackSent uint32) uint32 {
	return ackSent - rec.ServiceTime() - rec.EchoTimestamp()
}

// reliefOff turns relieves off, for the tests that measure it.
var reliefOff bool

// relieves reports whether the path may take over, by grant
// (cc.Window.Grant), what a marked sibling's cuts gave up. A switch hashes
// each source port onto one of its links (spec section 6.3), and some of a
// connection's paths may meet other traffic on a busy link while the rest
// cross idle ones. The marked paths' windows fall, the connection then
// carries less than its receiver grants, and additive increase on the clear
// paths takes a round trip a packet to make it up: tens of round trips at
// 400 Gb/s. The path relieves a sibling while the connection's windows
// carry less than the hint, at their least round trips or at those and
// their routes' own queues (underHintQueued), the path went unmarked for
// two of its round trips, and a sibling on its plane, marked within its
// last round trip, queues more than an eighth of the least round trip
// longer: their routes differ in a busy link. A queue that every path
// meets, the receiver's link in an incast or a bottleneck before it, shows
// in every path alike and relieves none.
func (p *sendPath) relieves(at clock.Time) bool {
	s := p.s
	if reliefOff || !p.queued || p.markedAt != 0 && at.Sub(p.markedAt) < 2*p.RTT.SRTT {
		return false
	}
	for _, q := range s.paths {
		if q == p || q.Plane() != p.Plane() || !q.InUse() || !q.queued || q.markedAt == 0 || at.Sub(q.markedAt) > q.RTT.SRTT {
			continue
		}
		if q.queue-p.queue > p.RTT.Min/8 {
			// The rates last: underHintQueued passes over every path.
			return s.underHint() || !reliefLeastOnly && s.underHintQueued()
		}
	}
	return false
}

// underHintQueued reports whether the receiver's hint is above the rate
// the windows of the paths in service give at each one's least round trip
// plus its route's own queue: the one-way queue its latest ACK record read,
// less the least such reading of the connection's paths. Behind a busy
// link a path's window fills with packets that wait there, and at its
// least round trip (underHint) it counts as carrying far more than it
// does, so the connection's clear paths would take none of what the busy
// ones give up. The least reading stands for a queue that every path
// meets, the receiver's link or a bottleneck before it: counted, that
// queue would make relief grow the windows further into it. Each reading
// is one record's, so the least is near such a queue's trough, not its
// mean, and the readings of other paths keep some of it. The window counts
// in whole packets and a path without an RTT sample counts as nothing,
// where underHint counts the window's fraction and such a path at the
// fastest least RTT; both make this rate the lower.
func (s *sender) underHintQueued() bool {
	if !s.hinted() {
		return false
	}
	shared := time.Duration(-1)
	for _, q := range s.paths {
		if q.InUse() && q.RTT.Samples > 0 && q.queued && (shared < 0 || q.queue < shared) {
			shared = q.queue
		}
	}
	rate := 0.0
	for _, q := range s.paths {
		if !q.InUse() || q.RTT.Samples == 0 {
			continue
		}
		rtt := q.RTT.Min
		if q.queued {
			rtt += q.queue - shared
		}
		rate += float64(q.window) * s.mss / rtt.Seconds()
	}
	return rate < s.hint
}

// reliefLeastOnly restores, for the tests that measure underHintQueued,
// relief by the windows' rate at their least round trips alone.
var reliefLeastOnly bool

// routeClearOff turns routeClear off, for the tests that measure it.
var routeClearOff bool

// routeClear reports whether the path may grow by grant
// (cc.Window.Grant) because its route has room again: the record, of the
// route the path is on, took a sample that queues less than an eighth of
// the path's least round trip, less the host's scheduling delay, and less
// than half of what the path read at its last mark on the route whose
// record took a sample; no mark came for the least round trip; the path's
// least round trip is within a quarter of its connection's shortest, on
// any plane; and the connection's windows carry less than the hint.
//
// Windows cut while other traffic crossed the route stay small once that
// traffic thins, and additive increase takes a round trip a packet to
// regrow them: tens of round trips at 400 Gb/s. A DCTCP bottleneck keeps
// its queue near its marking threshold, and half of the mark's reading
// leaves out one whose threshold is short. The eighth leaves out a queue
// that reads far above the threshold, as behind a host's own queues,
// which drains in part after each cut and fills again; a host that runs
// the engine late delays every sample, so a reading under that delay says
// nothing. A queue reads against its plane's least reading, so where
// every path of a plane met a standing queue from its first sample, the
// queue is in the base and reads as none; such paths' least round trips
// are long against the connection's shortest, which another plane may
// hold. A plane much longer than the others grants nothing by this rule.
// NSCC's fast increase reads a queue near zero the same way.
func (p *sendPath) routeClear(sampled bool, at clock.Time) bool {
	if routeClearOff || !sampled || !p.s.underHint() {
		return false
	}
	least := p.RTT.Min
	room := p.clearRoom()
	if p.markedAt != 0 {
		if at.Sub(p.markedAt) < least {
			return false
		}
		if p.markQueue > 0 {
			room = min(room, p.markQueue/2)
		}
	}
	if p.queue >= room {
		return false
	}
	shortest, _ := p.s.leastRTTs()
	return least <= shortest+shortest/4
}

// sentSince reports whether the packet whose Timestamp a record echoes was
// sent at or after since, a move of the path; a since of 0 is none. The
// Timestamp is the sender's clock in nanoseconds, modulo 2^32 (spec
// section 5.1), so it is read within half of that of since. A move more
// than an MPL ago left no packet of before it that could still arrive.
func (p *sendPath) sentSince(echo uint32, since, at clock.Time) bool {
	return since == 0 || at.Sub(since) > p.s.c.ep.cfg.MPL || int32(echo-uint32(since)) >= 0
}

// clearRoom is the one-way queue under which the path's route reads as
// clear: an eighth of its least RTT, less the delay the host's scheduling
// adds (the timeouts' H in docs/cc.md), which a queue's reading holds too.
func (p *sendPath) clearRoom() time.Duration {
	return p.RTT.Min/8 - p.s.c.ep.hostLate()
}

// lateDelivery reads an ACK record for news of the packets the path's last
// retransmission timeout saw in flight. One reported received was only
// late, so the timeout was spurious: the path, or the host running the
// engine, was slow, not broken. Its DSN is acknowledged, so that a resend
// still queued does not go. The path gets back the window the timeout cut
// and returns to service at once, and the connection's timeouts keep the
// round trip it revealed as their floor (lateFloor). Only a record of the
// packets the timeout saw reveals one: a record whose newest PSN was sent
// after the timeout says that the packet arrived, not when, since its own
// ACK may have been lost. A record that covers every PSN the timeout saw
// ends the watch: whatever it does not report received was lost indeed.
func (p *sendPath) lateDelivery(rec proto.AckRecord, h uint32, at clock.Time) {
	es := p.EpochStart(p.lastTimeout.epoch) // bits before it say nothing (spec section 6.3)
	late := false
	for psn := p.lastTimeout.from; psn != p.lastTimeout.to && proto.SeqLessEq(psn, h); psn++ {
		if k := h - 1 - psn; proto.SeqLess(psn, es) || psn != h && (k >= 256 || !rec.Received(int(k))) {
			continue
		}
		if r := p.slot(psn); r.psn == psn {
			p.s.ackDSN(r.dsn)
		}
		late = true
	}
	if late || proto.SeqLessEq(p.lastTimeout.to-1, h) {
		p.lastTimeout.open = false
	}
	if !late {
		return
	}
	if newest := p.slot(h); proto.SeqLess(h, p.lastTimeout.to) && newest.psn == h {
		// The round trip of the record's newest packet, sent before the
		// timeout within the watch: when an older one arrived the record
		// does not say, and the watch may span several timeouts. Less the
		// time the receiver held its report, an ACK's delay or a record
		// repeated long after a lost ACK first carried it (spec section
		// 5.5).
		held := time.Duration(rec.ServiceTime())
		p.s.sawLate(max(at.Sub(newest.sentAt)-held, 0))
	}
	p.Counters.SpuriousTimeouts++
	p.s.stats.Spurious++
	p.cwin.Raise(p.lastTimeout.window)
	p.windowChanged()
	p.timeouts = 0
	if p.Delivered() {
		p.armTimer(at)
	}
}

func (p *sendPath) resolveAcked(r *sendRec, at clock.Time) {
	r.resolved = true
	if r.full && r.sentAt > p.s.fullAcked[p.Plane()] {
		p.s.fullAcked[p.Plane()] = r.sentAt // a packet of full size crossed the plane
	}
	if p.s.c.ep.tracer != nil {
		p.s.c.trace(TraceEvent{Kind: TraceAcked, Path: int(p.ID()), PSN: r.psn, DSN: r.dsn, RTT: at.Sub(r.sentAt)})
	}
	if r.sentAt > p.s.newestAcked {
		p.s.newestAcked, p.s.newestRTT = r.sentAt, at.Sub(r.sentAt)
	}
	p.s.deliveredSent = max(p.s.deliveredSent, r.sentAt)
	p.released(r)
	p.Counters.Acked++
	if s := p.s; !s.started && s.train.at != 0 && !r.retx {
		s.trainSent(r.sentAt) // a resend left when its loss was found, not with the train
	}
	p.s.ackDSN(r.dsn)
}

// resolveLost declares the transmission with PSN psn lost and queues its
// content for retransmission. It does not when the DSN was acknowledged
// another way or a later transmission of it is still out.
func (p *sendPath) resolveLost(r *sendRec, psn uint32, cause LossCause) {
	r.resolved, r.declared = true, true
	p.released(r)
	if cause == LossLocal {
		p.Counters.LocalDrops++ // the path carried nothing, so lost nothing
	} else {
		p.Counters.Lost++
	}
	s := p.s
	if s.c.ep.tracer != nil {
		s.c.trace(TraceEvent{Kind: TraceLost, Path: int(p.ID()), PSN: psn, DSN: r.dsn, Loss: cause})
	}
	d := s.record(r.dsn)
	if d == nil || d.acked || d.queued || d.waiting || d.path != p.ID() || d.psn != psn {
		return
	}
	d.queued = true
	d.overflowed = r.first && cause != LossLocal && s.receiverBound()
	s.retx = append(s.retx, r.dsn)
}
