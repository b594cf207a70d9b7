// Datagrams the local host dropped. A sender faster than its own NIC or
// qdisc fills their queue, and the kernel drops what does not fit before it
// leaves the host. The UDP driver learns of each such drop
// (link.LocalDropHandler). The loss is certain and the network had no part
// in it: the packet is resent at once, its path is not blamed, and the
// connection sends no faster than its host let out. Where one plane's
// drops show its queue is its own, that plane's port sends no faster than
// its queue let out, and the connection's other planes carry the rest
// (planeQueue). A receiver slower than
// its link fills its socket's receive buffer, and the kernel reports how
// much it lost (link.OverflowHandler): the endpoint's rate hints then share
// no more than it drains.

package engine

import (
	"math"
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

const (
	// hostMeterSpan is how long the sending rate is measured over, and how
	// often a limit from the host's drops grows.
	hostMeterSpan = time.Millisecond
	// hostCut is what a drop leaves of the rate the connection was sending
	// at, and hostCutAgain what a drop leaves soon after a cut, within
	// 2 hostMeterSpan: the cut before was not enough, and a sender far
	// above its host's rate gets there in a few cuts. hostGrowth is the
	// limit's growth per hostMeterSpan without a drop, so that it finds the
	// host's rate again when that rises; hostGrowthBack its growth while
	// below hostNear of the rate at the last drop, which the host let out
	// not long ago.
	hostCut        = 0.8
	hostCutAgain   = 0.5
	hostGrowth     = 1.02
	hostGrowthBack = 1.1
	hostNear       = 0.85
	// hostAskedShare is the least share of the rate asked for that a
	// first cut counts as sent (hostRate.dropped).
	hostAskedShare = 0.25
	// hostFloor is the least the limit falls to, in bytes a second, so that
	// drops never stop a connection.
	hostFloor = 1e6
	// ownQueueRounds is how many rounds of drops, each a hostMeterSpan or
	// more after the one before, one plane must take with no other plane
	// dropping, while the others carry half as much or more, before the
	// plane's queue counts as its own. One flush can drop a batch of one
	// path from a shared queue; three rounds on one plane alone are
	// unlikely to be chance.
	ownQueueRounds = 3
)

// hostRate is a limit on a rate, learned from the drops of one of the local
// host's queues: a connection's sending rate, from its host's queue on the
// way out, or an endpoint's inbound capacity, from its receive buffer. It
// falls to hostCut of the rate that went through when the queue drops a
// packet (hostCutAgain soon after a cut), at most once per hostMeterSpan,
// grows back each hostMeterSpan without one, and goes once it is twice the
// rate asked for: what the connection's windows and receiver allow, or the
// endpoint's configured capacity. A connection that sent little for a
// while keeps its limit: a burst after a pause is what fills a queue. A
// plane's limit (planeQueue) has no rate asked for, and stays.
type hostRate struct {
	limitRate float64    // bytes a second, +Inf for none
	cutAt     clock.Time // the last cut
	grownAt   clock.Time // the last growth
	asked     float64    // the rate the connection asked for at its last packet, before the limit
	peak      float64    // the rate sent at the last drop

	// The meter: bytes sent since meterAt, and the rate of the last whole
	// span measured, over sendSpan; 0 before one.
	metering   bool
	meterBytes float64
	meterAt    clock.Time
	sendRate   float64
	sendSpan   time.Duration
}

// limited reports whether the host's drops limit the rate now.
func (h *hostRate) limited() bool { return !math.IsInf(h.limitRate, 1) }

// lift takes the limit away.
func (h *hostRate) lift() { h.limitRate = math.Inf(1) }

// limit counts bytes sent at now and returns rate capped by the host's
// limit.
func (h *hostRate) limit(now int64, bytes int, rate float64) float64 {
	t := clock.Time(now)
	h.meter(t, bytes)
	h.asked = rate
	if !h.limited() {
		return rate
	}
	h.grow(t, rate)
	return min(rate, h.limitRate)
}

// meter counts bytes sent at now. A span lasts from one byte metered to
// the first a hostMeterSpan or more later; its rate counts the pauses
// within it.
func (h *hostRate) meter(now clock.Time, bytes int) {
	if !h.metering {
		h.metering, h.meterAt = true, now // the first span starts with the first bytes
	}
	h.meterBytes += float64(bytes)
	if span := now.Sub(h.meterAt); span >= hostMeterSpan {
		h.sendRate, h.sendSpan = h.meterBytes/span.Seconds(), span
		h.meterBytes, h.meterAt = 0, now
	}
}

// grow grows the limit once a span without a cut, and takes it away once
// it is twice the rate asked for.
func (h *hostRate) grow(now clock.Time, rate float64) {
	if now.Sub(h.grownAt) < hostMeterSpan || now.Sub(h.cutAt) < hostMeterSpan {
		return
	}
	if h.limitRate < hostNear*h.peak {
		h.limitRate = min(h.limitRate*hostGrowthBack, hostNear*h.peak)
	} else {
		h.limitRate *= hostGrowth
	}
	h.grownAt = now
	if h.limitRate > 2*rate {
		h.limitRate = math.Inf(1) // the host lets out more than this connection would send
	}
}

// dropped takes a drop by the host at now. It reports whether the limit
// was cut.
func (h *hostRate) dropped(now clock.Time) bool {
	// The rate the connection sent at: its limit, or what it asked for.
	// Before a limit, what it asked for may be far above what it sent,
	// windows grown far beyond what the NIC let out, so the rate measured
	// counts where it is less, down to hostAskedShare of what was asked: a
	// span far below that is one the connection spent waiting, not what
	// overflowed the queue.
	sent := min(h.limitRate, h.asked)
	switch m := h.measured(now); {
	case math.IsInf(sent, 1) || sent <= 0:
		sent = m
	case !h.limited() && m > 0 && m < sent:
		sent = max(m, hostAskedShare*sent)
	}
	return h.cutFrom(now, sent)
}

// measured is the rate sent: the last whole span's, where that span was
// short enough to hold no pause, or else the span's so far. After a pause
// the rate of a span that held it is no measure of what a burst sends.
func (h *hostRate) measured(now clock.Time) float64 {
	if h.sendRate > 0 && h.sendSpan < 2*hostMeterSpan {
		return h.sendRate
	}
	return h.meterBytes / max(now.Sub(h.meterAt), hostMeterSpan/10).Seconds()
}

// cutFrom takes a drop at now, by a queue that the rate sent let
// overflow. It reports whether the limit was cut.
func (h *hostRate) cutFrom(now clock.Time, sent float64) bool {
	if h.limited() && now.Sub(h.cutAt) < hostMeterSpan {
		return false // the cut before has not had time to act
	}
	cut := hostCut
	if h.limited() && now.Sub(h.cutAt) < 2*hostMeterSpan {
		cut = hostCutAgain
	}
	h.limitRate = max(cut*sent, hostFloor)
	h.peak = sent
	h.cutAt, h.grownAt = now, now
	return true
}

// planeQueue is what the endpoint learned of one plane's queue on the way
// out: the plane's own device and qdisc, or a queue that every plane
// passes. Nothing tells which, but a queue of one plane drops that plane's
// packets alone, while one that every plane passes drops whichever plane's
// packets come when it is full. Until a plane's drops show the queue is
// its own (dropped), a drop cuts the rate of the connection that sent it,
// as is right for a shared queue. From then on they cut the plane's own
// limit instead, and its port (nicPorts) gives it new data at that rate:
// a plane behind a slow qdisc no longer holds back the others.
type planeQueue struct {
	host hostRate // the plane's limit once its queue is its own; it meters the plane's rate always
	own  bool     // the plane's drops showed its queue is its own
	sent uint64   // bytes of payload sent on the plane, ever
	run  dropRun  // the plane's drops since another plane last dropped
}

// dropRun is a run of one plane's drops with no other plane dropping.
type dropRun struct {
	rounds int        // drops a hostMeterSpan or more after the round before
	at     clock.Time // the last round's first drop
	sent   uint64     // the plane's bytes at the first
	others uint64     // the other planes' bytes at the first
}

// queueKind is whose a queue on the way out that dropped a packet is
// (nicPorts.dropped).
type queueKind int

const (
	sharedQueue   queueKind = iota // a queue the plane may share with others
	ownQueue                       // the plane's own queue, its limit cut a moment ago
	ownQueueCut                    // the plane's own queue, its limit cut now
	ownQueueFound                  // the plane's own queue, found with this drop and its limit cut
)

// dropped takes a drop at now by plane's queue on the way out, and reports
// whose queue it was. A drop by a plane's own queue cuts the plane's limit.
// Any other ends the run of every other plane, as a queue that drops two
// planes' packets may be theirs together, and adds to its plane's run,
// which finds the queue the plane's own after ownQueueRounds. An endpoint
// of one plane cannot tell, and counts its queue shared.
func (n *nicPorts) dropped(plane int, now clock.Time) queueKind {
	if plane >= len(n.queue) || len(n.queue) < 2 {
		return sharedQueue
	}
	q := &n.queue[plane]
	if q.own {
		// A plane's limit never goes (hostRate), so its drops come at the
		// limit.
		if q.host.cutFrom(now, q.host.limitRate) {
			n.refresh(plane)
			return ownQueueCut
		}
		return ownQueue
	}
	for i := range n.queue {
		if i != plane {
			n.queue[i].run = dropRun{}
		}
	}
	r := &q.run
	switch {
	case r.rounds == 0:
		*r = dropRun{rounds: 1, at: now, sent: q.sent, others: n.total - q.sent}
	case now.Sub(r.at) >= hostMeterSpan:
		r.rounds++
		r.at = now
	}
	othersSent, sent := n.total-q.sent-r.others, q.sent-r.sent
	if r.rounds < ownQueueRounds || 2*othersSent < sent {
		return sharedQueue
	}
	q.own, q.run = true, dropRun{}
	q.host.cutFrom(now, q.host.measured(now))
	n.refresh(plane)
	return ownQueueFound
}

// limited reports whether plane's own queue limits what its port takes.
func (n *nicPorts) limited(plane int) bool {
	return plane < len(n.queue) && n.queue[plane].host.limited()
}

// LocalDrop is called by the port when the local host dropped a datagram
// this endpoint sent before it left, a queue on its way out full (see
// link.LocalDropHandler). A data packet is lost for certain: it is resent
// at once, it counts against no path, and its connection sends slower. An
// MTU probe goes again without counting as unanswered. Anything else, an
// ACK or a control packet, is left to the protocol's own recovery.
func (e *Endpoint) LocalDrop(d *link.Datagram) {
	var pkt proto.Packet
	if err := e.decodeOwn(&pkt, d); err != nil {
		return // not one of ours
	}
	c := e.dropper
	if c == nil || e.conns[c.localID] != c || !c.sent(&pkt, d) {
		c = nil
		for _, q := range e.conns { // at most one sent it, so the order does not matter
			if q.sent(&pkt, d) {
				c = q
				break
			}
		}
	}
	if c == nil || c.state != Established {
		return
	}
	e.dropper = c // the next drop of the same flush is most likely the same connection's
	switch t := pkt.Type(); {
	case t.IsData():
		c.snd.localDrop(&pkt)
	case t == proto.TypeProbe && isMTUProbe(pkt.Probe().ProbeID()):
		c.mtuProbeDropped(pkt.Probe().ProbeID())
	}
	e.flush()
}

// localDrop hands a data packet in flight that the host dropped to the
// transport, which resends it.
func (s *sender) localDrop(pkt *proto.Packet) {
	p, r := s.transmission(pkt)
	if r == nil {
		return
	}
	s.stats.LocalDrops++
	s.c.tp.dropped(s, p, r, r.psn)
	s.pump()
}

// hostDropped takes a drop of one of the connection's packets by plane's
// queue on the way out at now. A shared queue cuts the connection's rate.
// A plane's own queue cuts that plane's limit alone, and once it is found
// to be the plane's own, the cuts its drops alone made to the rates of the
// endpoint's connections are taken back.
func (s *sender) hostDropped(plane int, now clock.Time) {
	switch s.c.ep.ports.dropped(plane, now) {
	case ownQueueFound:
		s.stats.PlaneCuts++
		for _, c := range s.c.ep.conns {
			if c.snd.hostCutBy == plane {
				c.snd.host.lift()
				c.snd.hostCutBy = -1
			}
		}
	case ownQueueCut:
		s.stats.PlaneCuts++
	case ownQueue:
	default:
		limited := s.host.limited()
		if limited && s.hostCutBy != plane {
			s.hostCutBy = -1 // the limit stands for drops on several planes
		}
		if !s.host.dropped(now) {
			return
		}
		s.stats.HostCuts++
		if !limited {
			s.hostCutBy = plane
		}
	}
}

// transmission finds the data packet pkt among the transmissions in
// flight, or returns nil.
func (s *sender) transmission(pkt *proto.Packet) (*sendPath, *sendRec) {
	id, psn := int(pkt.Common.PathID()), pkt.Common.PSN()
	if s.paths == nil || id >= len(s.paths) {
		return nil, nil
	}
	p := s.paths[id]
	if r := p.unresolved(psn); r != nil {
		return p, r
	}
	return nil, nil
}

// Overflowed is called by the port when datagrams for this endpoint were
// lost in its full receive buffer (see link.OverflowHandler): it drains
// slower than its senders send. Its inbound capacity, which its rate hints
// share among the senders (spec section 6.6), falls to what it was seen to
// drain, as hostRate cuts a sender's rate, and grows back while nothing
// overflows. An endpoint given no InboundCapacity starts sharing one
// here: its connections' ACKs carry hints from then on.
func (e *Endpoint) Overflowed(lost int) {
	e.stats.Overflows += uint64(lost)
	if e.cfg.NoRateHints || !e.drain.dropped(e.clock.Now()) {
		return
	}
	e.stats.CapacityCuts++
	capacity := e.inboundCapacity()
	if e.alloc != nil {
		e.alloc.SetCapacity(capacity)
		return
	}
	e.alloc = cc.NewAllocator(cc.AllocParams{Capacity: capacity, Horizon: e.cfg.HintHorizon})
	for _, id := range e.connIDs() {
		if r := &e.conns[id].rcv; r.c != nil && r.share == nil {
			r.share = e.alloc.Member(id)
		}
	}
}

// inboundCapacity is the capacity the rate hints share: InboundCapacity,
// or less where the receive buffer's overflows showed the endpoint drains
// less, less what the hints hold back while arrivals are marked
// (inbound.go).
func (e *Endpoint) inboundCapacity() float64 {
	c := e.drain.limitRate
	if asked := e.cfg.InboundCapacity; asked > 0 {
		c = min(asked, c)
	}
	return c * (1 - e.marks.hold)
}

// drained counts bytes received at at, for the rate the endpoint drains
// its receive buffer at, and passes a change of the capacity learned from
// overflows on to the rate hints.
func (e *Endpoint) drained(at clock.Time, bytes int) {
	asked := e.cfg.InboundCapacity
	if asked <= 0 {
		asked = math.Inf(1)
	}
	before := e.drain.limitRate
	e.drain.limit(int64(at), bytes, asked)
	if e.drain.limitRate != before && e.alloc != nil {
		e.alloc.SetCapacity(e.inboundCapacity())
	}
}

// mtuProbeDropped takes an MTU probe the host dropped on its way out: it
// tested nothing, so it does not count as unanswered whatever its
// companion's fate, and goes again when its wait is over.
func (c *Conn) mtuProbeDropped(id uint32) {
	if c.mtu == nil {
		return
	}
	for plane := range c.mtu.planes {
		if p := &c.mtu.planes[plane]; p.trying != 0 && p.probeID == id {
			p.heard, p.companion, p.waits = false, 0, mtuWaits
			p.pairs = max(p.pairs-1, 0)
			return
		}
	}
}
