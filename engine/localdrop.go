// Datagrams the local host dropped. A sender faster than its own NIC or
// qdisc fills their queue, and the kernel drops what does not fit before it
// leaves the host. The UDP driver learns of each such drop
// (link.LocalDropHandler). The loss is certain and the network had no part
// in it: the packet is resent at once, its path is not blamed, and the
// connection sends no faster than its host let out. A receiver slower than
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
	// hostFloor is the least the limit falls to, in bytes a second, so that
	// drops never stop a connection.
	hostFloor = 1e6
)

// hostRate is a limit on a rate, learned from the drops of one of the local
// host's queues: a connection's sending rate, from its host's queue on the
// way out, or an endpoint's inbound capacity, from its receive buffer. It
// falls to hostCut of the rate that went through when the queue drops a
// packet (hostCutAgain soon after a cut), at most once per hostMeterSpan,
// grows back each hostMeterSpan without one, and goes once it is twice the
// rate asked for: what the connection's windows and receiver allow, or the
// endpoint's configured capacity. A connection that sent little for a
// while keeps its limit: a burst after a pause is what fills a queue.
type hostRate struct {
	limitRate float64    // bytes a second, +Inf for none
	cutAt     clock.Time // the last cut
	grownAt   clock.Time // the last growth
	asked     float64    // the rate the connection asked for at its last packet, before the limit
	peak      float64    // the rate sent at the last drop

	// The meter: bytes sent since meterAt, and the rate of the last whole
	// span measured.
	meterBytes float64
	meterAt    clock.Time
	sendRate   float64
}

// limited reports whether the host's drops limit the rate now.
func (h *hostRate) limited() bool { return !math.IsInf(h.limitRate, 1) }

// limit counts bytes sent at now and returns rate capped by the host's
// limit.
func (h *hostRate) limit(now int64, bytes int, rate float64) float64 {
	t := clock.Time(now)
	h.meterBytes += float64(bytes)
	if span := t.Sub(h.meterAt); span >= hostMeterSpan {
		h.sendRate = h.meterBytes / span.Seconds()
		h.meterBytes, h.meterAt = 0, t
	}
	h.asked = rate
	if !h.limited() {
		return rate
	}
	if t.Sub(h.grownAt) >= hostMeterSpan && t.Sub(h.cutAt) >= hostMeterSpan {
		if h.limitRate < hostNear*h.peak {
			h.limitRate = min(h.limitRate*hostGrowthBack, hostNear*h.peak)
		} else {
			h.limitRate *= hostGrowth
		}
		h.grownAt = t
		if h.limitRate > 2*rate {
			h.limitRate = math.Inf(1) // the host lets out more than this connection would send
		}
	}
	return min(rate, h.limitRate)
}

// dropped takes a drop by the host at now. It reports whether the limit
// was cut.
func (h *hostRate) dropped(now clock.Time) bool {
	if h.limited() && now.Sub(h.cutAt) < hostMeterSpan {
		return false // the cut before has not had time to act
	}
	// The rate the connection sent at: its limit, or what it asked for,
	// or else what it was measured to send.
	sent := min(h.limitRate, h.asked)
	if math.IsInf(sent, 1) || sent <= 0 {
		sent = max(h.sendRate, h.meterBytes/max(now.Sub(h.meterAt), hostMeterSpan/10).Seconds())
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

// transmission finds the data packet pkt among the transmissions in
// flight, or returns nil.
func (s *sender) transmission(pkt *proto.Packet) (*sendPath, *sendRec) {
	id, psn := int(pkt.Common.PathID()), pkt.Common.PSN()
	if s.paths == nil || id >= len(s.paths) {
		return nil, nil
	}
	p := s.paths[id]
	if !proto.SeqLess(psn, p.next) || proto.SeqLess(psn, p.oldest) {
		return nil, nil // not in flight
	}
	r := p.slot(psn)
	if r.psn != psn || r.resolved {
		return nil, nil
	}
	return p, r
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
