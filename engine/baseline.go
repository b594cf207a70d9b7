package engine

import (
	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// baseline is the state of a connection in baseline mode (spec section 10):
// RoCEv2 over the same wire format, so both can be compared on one network
// with one engine. One path, a fixed source port, in-order receive,
// go-back-N, a local ACK timeout, CNPs and DCQCN. It is honest, not
// crippled: a go-back-N sender resends only from the PSN the receiver
// names, and DCQCN runs with its published constants.
type baseline struct {
	// Receiver: the PSN expected next, and the SEQ_ERR NACK of the
	// current gap (one per gap, again after the NACK timer).
	expected uint32
	nakSent  bool
	nakAt    clock.Time
	lastCNP  clock.Time
	cnpSent  bool

	// Sender: go back to resendPSN and resend from there with the same
	// PSNs; DCQCN sets the rate.
	resend    bool
	resendPSN uint32
	dcqcn     *cc.DCQCN
	retry     clock.Timer // a refused (RNR) PSN is resent after its wait
	retryPSN  uint32
	paused    bool // waiting out an RNR: nothing is sent
	cnps      uint64
}

func (c *Conn) isBaseline() bool { return c.mode == proto.ModeBaseline }

func (c *Conn) initBaseline() {
	c.bl.expected = c.peerISN
	c.bl.dcqcn = cc.NewDCQCN(cc.DefaultDCQCN(c.ep.cfg.LineRate), int64(c.ep.clock.Now()))
	c.bl.retry = c.ep.clock.NewTimer(func() {
		if c.state == Closed {
			return
		}
		c.bl.paused = false
		c.snd.goBack(c.bl.retryPSN)
		c.snd.pump()
		c.ep.flush()
	})
}

// gate is the baseline receiver's in-order check, before the spec's steps
// from 9 on: only the expected PSN goes on. It reports whether the packet
// does.
func (r *receiver) gate(h proto.CommonHeader, d *link.Datagram, plane int, at clock.Time) bool {
	c := r.c
	bl := &c.bl
	if d.ECN == link.CE && (!bl.cnpSent || at.Sub(bl.lastCNP) >= cnpInterval) {
		bl.cnpSent, bl.lastCNP = true, at
		var pkt proto.Packet
		c.build(&pkt, proto.TypeCNP, 0, 0)
		pkt.Common.SetDstConnID(c.peerID)
		c.emit(&pkt, plane, c.ep.cfg.SourcePorts[0])
	}
	switch d := int32(h.PSN() - bl.expected); {
	case d < 0: // a resend of what arrived: record it and acknowledge at once
		r.stats.Duplicates++
		r.recordPath(h, at)
		r.ackNow()
		return false
	case d > 0: // a gap: drop, and name the PSN expected (once per gap)
		r.stats.OutOfOrder++
		c.snd.equip() // the NAKs' spacing is its path's RTO
		if !bl.nakSent || at.Sub(bl.nakAt) >= c.snd.paths[0].rto() {
			bl.nakSent, bl.nakAt = true, at
			r.stats.Nacks[proto.NackSeqErr]++
			var pkt proto.Packet
			c.build(&pkt, proto.TypeNack, 0, 0)
			pkt.Common.SetDstConnID(c.peerID)
			n := pkt.Nack()
			n.SetCode(proto.NackSeqErr)
			n.SetPSN(bl.expected)
			n.SetDSN(h.DSN())
			c.emit(&pkt, plane, c.ep.cfg.SourcePorts[0])
		}
		return false
	}
	bl.nakSent = false
	return true
}

// goBack makes the baseline sender resend from psn, with the same PSNs.
func (s *sender) goBack(psn uint32) {
	p := s.paths[0]
	if psn-p.oldest >= p.next-p.oldest {
		return // nothing of ours at or after psn is unacknowledged
	}
	s.c.bl.resend, s.c.bl.resendPSN = true, psn
}

// sendBaseline is sendOne in baseline mode: resends first (go-back-N), then
// new data in order, all at DCQCN's rate.
func (s *sender) sendBaseline() bool {
	c := s.c
	bl := &c.bl
	p := s.paths[0]
	now := c.ep.clock.Now()
	if bl.paused || p.State() == pathmgr.Down {
		return false // waiting out an RNR, or the plane is down
	}
	if ok, at := s.pacer.Ready(int64(now)); !ok {
		if s.paceT.Deadline() != clock.Time(at) {
			s.paceT.Reset(clock.Time(at))
		}
		return false
	}
	for bl.resend {
		psn := bl.resendPSN
		if psn == p.next {
			bl.resend = false
			break
		}
		bl.resendPSN++
		sr := p.slot(psn)
		r := s.record(sr.dsn)
		if sr.resolved || r == nil || r.acked {
			continue
		}
		sr.sentAt = now
		s.emitData(sr.dsn, r, p, psn, true, false)
		s.paceBaseline(int(r.n) + packetOverhead)
		return true
	}
	if p.inflight >= p.window || !p.ringRoom() || s.nextDSN-s.una >= s.window || !c.knows(p.Plane()) {
		return false
	}
	m := s.nextMessage()
	if m == nil {
		return false
	}
	r := s.newDSN(m)
	s.transmit(s.nextDSN-1, r, p, false, false)
	s.paceBaseline(int(r.n) + packetOverhead)
	return true
}

func (s *sender) paceBaseline(bytes int) {
	now := int64(s.c.ep.clock.Now())
	d := s.c.bl.dcqcn
	d.OnSent(now, bytes)
	s.pacer.Sent(now, bytes, d.Rate(now))
}

// ackedInOrder resolves, in baseline mode, the transmissions whose DSN the
// cumulative DSN covers: an ACK whose records were lost still frees the
// window.
func (s *sender) ackedInOrder() {
	p := s.paths[0]
	for p.oldest != p.next {
		r := p.slot(p.oldest)
		if !r.resolved {
			if d := s.record(r.dsn); d != nil && !d.acked {
				return
			}
			r.resolved = true
			p.released()
			p.Counters.Acked++
		}
		p.oldest++
	}
}

// onCNP is a congestion notification from the peer (baseline mode).
func (s *sender) onCNP(at clock.Time) {
	if !s.c.isBaseline() {
		return
	}
	s.c.bl.cnps++
	s.c.bl.dcqcn.OnCNP(int64(at))
}
