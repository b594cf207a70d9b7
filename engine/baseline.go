package engine

import (
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// baseline is the transport of a connection in baseline mode (spec section
// 10). It is RoCEv2 over the same wire format, so that both can be compared
// on one network with one engine. It has one path, a fixed source port,
// in-order receive, go-back-N, a local ACK timeout, CNPs and DCQCN. It is
// faithful to RoCEv2 rather than crippled. A go-back-N sender resends only
// from the PSN the receiver names, and DCQCN runs with its published
// constants.
type baseline struct {
	c *Conn

	// Receiver. expected is the PSN expected next. A gap gets one SEQ_ERR
	// NACK, and another only after the NACK timer. CNPs go at most one per
	// cnpInterval.
	expected uint32
	nakSent  bool
	nakAt    clock.Time
	cnpSent  bool
	lastCNP  clock.Time

	// Sender. It goes back to resendPSN and resends from there with the
	// same PSNs. DCQCN sets the rate.
	resend    bool
	resendPSN uint32
	dcqcn     *cc.DCQCN
	cnps      uint64
	paused    bool        // waiting out an RNR, when nothing is sent
	retry     clock.Timer // ends the wait after an RNR
	retryPSN  uint32      // the refused PSN, resent after the wait
}

func newBaseline(c *Conn) *baseline {
	b := &baseline{c: c, expected: c.peerISN}
	b.dcqcn = cc.NewDCQCN(cc.DefaultDCQCN(c.ep.cfg.LineRate), int64(c.ep.clock.Now()))
	b.retry = c.ep.clock.NewTimer(b.onRetry)
	return b
}

// onRetry ends the wait after an RNR and goes back to the refused PSN.
func (b *baseline) onRetry() {
	c := b.c
	if c.state == Closed {
		return
	}
	b.paused = false
	b.goBack(b.retryPSN)
	c.snd.pump()
	c.ep.flush()
}

// window is fixed before the run, because DCQCN sets the rate.
func (b *baseline) window(c *Conn) cc.WindowParams {
	wp := cc.DefaultWindow
	w := float64(c.ep.cfg.BaselineWindow)
	wp.Initial, wp.Min, wp.Max = w, w, w
	wp.Delay = cc.DelayParams{}
	return wp
}

// hint is ignored. DCQCN alone sets the rate, as deployed.
func (b *baseline) hint(*sender, uint64) bool { return false }

// cnp slows DCQCN down.
func (b *baseline) cnp(_ *sender, at clock.Time) {
	b.cnps++
	b.dcqcn.OnCNP(int64(at))
}

// hints is false. The baseline's ACKs carry no limit (spec section 10).
func (b *baseline) hints() bool { return false }

// admit is the baseline receiver's in-order check, before steps 9 on of
// spec section 9. Only the expected PSN goes on. A CE-marked packet draws a
// CNP, at most one per cnpInterval.
func (b *baseline) admit(r *receiver, h proto.CommonHeader, d *link.Datagram, plane int, at clock.Time) bool {
	c := b.c
	if d.ECN == link.CE && (!b.cnpSent || at.Sub(b.lastCNP) >= cnpInterval) {
		b.cnpSent, b.lastCNP = true, at
		var pkt proto.Packet
		c.build(&pkt, proto.TypeCNP, 0, 0)
		pkt.Common.SetDstConnID(c.peerID)
		c.emit(&pkt, plane, c.ep.cfg.SourcePorts[0])
	}
	switch d := int32(h.PSN() - b.expected); {
	case d < 0: // a resend of what arrived; record it and acknowledge at once
		r.stats.Duplicates++
		r.recordPath(h, at)
		r.ackNow()
		return false
	case d > 0: // a gap; drop, and name the PSN expected, once per gap
		r.stats.OutOfOrder++
		c.snd.equip() // the NACKs are spaced by its path's RTO
		if !b.nakSent || at.Sub(b.nakAt) >= c.snd.paths[0].rto() {
			b.nakSent, b.nakAt = true, at
			r.stats.Nacks[proto.NackSeqErr]++
			var pkt proto.Packet
			c.build(&pkt, proto.TypeNack, 0, 0)
			pkt.Common.SetDstConnID(c.peerID)
			n := pkt.Nack()
			n.SetCode(proto.NackSeqErr)
			n.SetPSN(b.expected)
			n.SetDSN(h.DSN())
			c.emit(&pkt, plane, c.ep.cfg.SourcePorts[0])
		}
		return false
	}
	b.nakSent = false
	return true
}

// placed moves the expected PSN on.
func (b *baseline) placed() { b.expected++ }

// nacked notes a refusal of the expected packet. The packets behind it are
// a gap the sender already knows of, so no SEQ_ERR follows for them.
func (b *baseline) nacked(psn uint32) {
	if psn == b.expected {
		b.nakSent, b.nakAt = true, b.c.ep.clock.Now()
	}
}

// gapsLost is false. Go-back-N resends from the PSN the receiver names.
func (b *baseline) gapsLost() bool { return false }

// goBack makes the sender resend from psn, with the same PSNs.
func (b *baseline) goBack(psn uint32) {
	p := b.c.snd.paths[0]
	if psn-p.oldest >= p.next-p.oldest {
		return // nothing of ours at or after psn is unacknowledged
	}
	b.resend, b.resendPSN = true, psn
}

// sendOne sends resends first, going back N, then new data in order, all at
// DCQCN's rate.
func (b *baseline) sendOne(s *sender) bool {
	c := s.c
	p := s.paths[0]
	now := c.ep.clock.Now()
	if b.paused || p.State() == pathmgr.Down {
		return false // waiting out an RNR, or the plane is down
	}
	if ok, at := s.pacer.Ready(int64(now)); !ok {
		if s.paceT.Deadline() != clock.Time(at) {
			s.paceT.Reset(clock.Time(at))
		}
		return false
	}
	for b.resend {
		psn := b.resendPSN
		if psn == p.next {
			b.resend = false
			break
		}
		b.resendPSN++
		sr := p.slot(psn)
		r := s.record(sr.dsn)
		if sr.resolved || r == nil || r.acked {
			continue
		}
		sr.sentAt = now
		s.emitData(sr.dsn, r, p, psn, true, false)
		b.pace(s, int(r.n)+packetOverhead)
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
	b.pace(s, int(r.n)+packetOverhead)
	return true
}

// pace charges bytes to DCQCN and to the pacer at DCQCN's rate.
func (b *baseline) pace(s *sender, bytes int) {
	now := int64(s.c.ep.clock.Now())
	b.dcqcn.OnSent(now, bytes)
	s.pacer.Sent(now, bytes, b.dcqcn.Rate(now))
}

// acked resolves the transmissions whose DSN the cumulative DSN covers. An
// ACK whose records were lost still frees the window.
func (b *baseline) acked(s *sender) {
	if s.paths == nil {
		return
	}
	p := s.paths[0]
	for p.oldest != p.next {
		r := p.slot(p.oldest)
		if !r.resolved {
			if d := s.record(r.dsn); d != nil && !d.acked {
				return
			}
			r.resolved = true
			p.released(r)
			p.Counters.Acked++
		}
		p.oldest++
	}
}

// overdue does nothing. Go-back-N makes no copies.
func (b *baseline) overdue(*sender, clock.Time) {}

// expired is the local ACK timeout. It goes back to the oldest
// unacknowledged PSN.
func (b *baseline) expired(p *sendPath, _ clock.Time) bool {
	if p.State() == pathmgr.Down || p.inflight == 0 {
		return false
	}
	p.timedOut()
	p.Counters.Timeouts++
	p.s.stats.Timeouts++
	b.goBack(p.oldest)
	return true
}

// timeout is the retransmission timeout. The baseline has no tail probes.
func (b *baseline) timeout(p *sendPath) time.Duration { return p.rto() }

// rto is the local ACK timeout. It is fixed when LocalAckTimeout is set, as
// RoCEv2 configures it. Otherwise it is adaptive and doubles for each
// timeout in a row.
func (b *baseline) rto(p *sendPath, timeouts int) time.Duration {
	cfg := &b.c.ep.cfg
	if cfg.LocalAckTimeout > 0 {
		return cfg.LocalAckTimeout
	}
	rto := p.RTT.RTO(cfg.RTOInitial, cfg.RTOMin, cfg.RTOMax)
	for i := 0; i < timeouts && rto < cfg.RTOMax; i++ {
		rto *= 2
	}
	return min(rto, cfg.RTOMax)
}

// planeDown waits for the plane. With one path in order nothing can go
// elsewhere, and go-back-N resends from the oldest unacknowledged PSN when
// the plane returns.
func (b *baseline) planeDown(p *sendPath) {
	p.timer.Stop()
	p.PlaneDown()
}

// planeUp resumes at once from the oldest unacknowledged PSN.
func (b *baseline) planeUp(p *sendPath, now clock.Time) {
	p.timeouts = 0
	p.PlaneUp(false)
	b.goBack(p.oldest)
	p.armTimer(now)
}

// refused handles SEQ_ERR, which names the PSN to go back to. On RNR and
// RESOURCE it stops, waits RetryAfter, then goes back to the refused PSN
// (spec section 10).
// dropped goes back to the packet, as for a NAK (spec section 10). DCQCN
// alone sets the rate.
func (b *baseline) dropped(_ *sender, p *sendPath, _ *sendRec, psn uint32) {
	p.Counters.LocalDrops++
	b.goBack(psn)
}

func (b *baseline) refused(s *sender, n proto.NackHeader, _ *dsnRecord) {
	switch n.Code() {
	case proto.NackSeqErr:
		if !b.paused && !(b.resend && proto.SeqLessEq(b.resendPSN, n.PSN())) {
			b.goBack(n.PSN()) // not while waiting out an RNR, nor behind a resend already under way
		}
	case proto.NackRNR, proto.NackResource:
		b.paused, b.resend = true, false
		b.retryPSN = n.PSN()
		b.retry.Reset(s.c.ep.clock.Now().Add(time.Duration(n.RetryAfter()) * time.Microsecond))
		s.stats.Nacks++
	}
	s.pump()
}

// stop stops the RNR timer of a connection that ends.
func (b *baseline) stop() { b.retry.Stop() }
