// A path as the sender keeps it. It holds the PSN ring of send records, the
// packets in flight and the congestion window (spec sections 6.1 and 6.2).

package engine

import (
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// sendRec is one transmission on a path, the ring entry of its PSN.
type sendRec struct {
	psn      uint32 // the PSN the slot holds
	dsn      uint32
	sentAt   clock.Time
	resolved bool // acknowledged, declared lost, or refused
	full     bool // the packet was as large as the connection sent then (verifyMTU)
	retx     bool // content sent before: a resend, a probe or a copy
	first    bool // sent before the first ACK, in a first window of one BDP: new data, a resend, a probe or a copy
	declared bool // resolved as lost (resolveLost)
}

// sendPath is the sender's state of one path. The path manager
// (pathmgr.Path) keeps its state machine, source port, epoch, RTT and
// counters. The sender keeps the packets in flight on it, its window and its
// timer.
type sendPath struct {
	s *sender

	// PSNs in flight, from oldest to next. The ring holds PSN psn in slot
	// psn & (len - 1). It starts with minPathRing slots and doubles as
	// needed up to maxPathRing.
	ring     []sendRec
	next     uint32 // the next PSN
	oldest   uint32 // the oldest PSN not resolved
	inflight int
	// firstOut counts the packets in flight sent in a first window of one
	// BDP (sendRec.first).
	firstOut int

	// Congestion window. A window under one packet spaces the path's
	// packets (sendPath.spaced), from lastSent, when it last sent one.
	cwin     *cc.Window
	window   int     // cwin in whole packets
	traced   float64 // the window the last TraceWindow gave
	lastSent clock.Time
	ce       uint32 // the receiver's CE count for the path, as last reported
	// queue is the one-way queueing delay of the path's latest ACK record
	// with a sample, over its plane's base, and markedAt when a record last
	// reported a CE mark on it (relieves). markQueue is the queue of the
	// latest record with a sample that reported one, at least 1 ns, and 0
	// on a new route (routeClear).
	queue     time.Duration
	queued    bool
	markedAt  clock.Time
	markQueue time.Duration
	pass      float64 // how far the path is through its share of new data (sender.pickByRate)

	// The timer, for tail probes and retransmission timeouts.
	timer   clock.Timer
	armedAt clock.Time // when the timer was last armed (armTimer)
	probed  bool       // a tail probe went out since the last acknowledgment
	// tailStrikes counts the tails at which lostAtTail declared the path's
	// packets lost since the last news of the path: an acknowledgment, or
	// a record whose newest PSN, reported received, was declared lost.
	// struckAt is when it last did.
	tailStrikes uint8
	struckAt    clock.Time
	timeouts    uint8 // retransmission timeouts in a row, saturating
	// silent counts the transmissions on the path since the last news of
	// it: an ACK record that resolved a packet, or a probe's reply.
	silent int
	// lostSince is when the oldest packet the last retransmission timeout
	// saw in flight was sent (verifyMTU).
	lostSince clock.Time
	// timedOutAt is when the path's retransmission timeout last fired
	// (peerQuiet).
	timedOutAt clock.Time

	// The last retransmission timeout, until an ACK record shows whether
	// it was spurious: the PSNs it declared lost, their epoch and the
	// window it cut (see lateDelivery).
	lastTimeout struct {
		open     bool
		from, to uint32
		epoch    uint8
		window   float64
	}

	// home is the plane the path was dealt (dealtPlanes), or a shorter one
	// it left that for (leaveLongPlane). A path that left it when it
	// failed goes back once it works. returning is set while the path
	// drains, taking no data, before it moves to bound: its home, or a
	// shorter plane (goTo).
	home      int
	returning bool
	bound     int

	// The path manager's part: state, source port, epoch, RTT, counters.
	pathmgr.Path
}

// slot is PSN psn's send record, or the slot it would be in.
func (p *sendPath) slot(psn uint32) *sendRec { return &p.ring[psn&uint32(len(p.ring)-1)] }

// unresolved returns the record of PSN psn while it is in flight and
// unresolved, or nil.
func (p *sendPath) unresolved(psn uint32) *sendRec {
	if !proto.SeqLess(psn, p.next) || proto.SeqLess(psn, p.oldest) {
		return nil
	}
	if r := p.slot(psn); r.psn == psn && !r.resolved {
		return r
	}
	return nil
}

// ringRoom reports whether the path can issue another PSN without reusing
// the ring slot of an unresolved one. Either the ring has a free slot or it
// can grow, which transmit does.
func (p *sendPath) ringRoom() bool {
	return p.next-p.oldest < uint32(len(p.ring)) || len(p.ring) < maxPathRing
}

// growRing doubles the ring, moving the unresolved PSNs to their slots in
// it. Only the slots of PSNs from oldest to next are ever read, and
// transmit writes each before it is.
func (p *sendPath) growRing() {
	ring := make([]sendRec, 2*len(p.ring))
	for psn := p.oldest; psn != p.next; psn++ {
		ring[psn&uint32(len(ring)-1)] = *p.slot(psn)
	}
	p.ring = ring
}

// took and released count a packet in flight on the path and in the
// connection's total. The timers read the total at every packet, and
// summing it over the paths would read every path's state.
func (p *sendPath) took(r *sendRec) {
	p.lastSent = r.sentAt
	p.inflight++
	p.s.inflightAll++
	if r.first {
		p.firstOut++
	}
}

func (p *sendPath) released(r *sendRec) {
	p.inflight--
	p.s.inflightAll--
	if r.first {
		p.firstOut--
	}
}

// held is how many of the path's packets in flight count against its
// window. After a first window of one BDP, while the receiver is the
// bottleneck (receiverBound), that window's packets do not: N such windows
// overflowed the receiver's queue, and a path whose window is full of
// packets lost there sends nothing whose acknowledgment would show them
// lost (lostOvertaken). The receiver's hint paces what it sends meanwhile
// (docs/cc.md, the rate), so the senders together do not outrun its link;
// without pacing nothing would, and they all count.
func (p *sendPath) held() int {
	if p.firstOut > 0 && p.s.heard && !p.s.c.ep.cfg.NoPacing && p.s.receiverBound() {
		return p.inflight - p.firstOut
	}
	return p.inflight
}

// inflight is the number of packets sent on any path and not yet resolved.
func (s *sender) inflight() int { return s.inflightAll }

func (p *sendPath) advance() {
	for p.oldest != p.next && p.slot(p.oldest).resolved {
		p.oldest++
	}
}

// rateChanged records the path's window, minimum RTT and state for the
// pacing rate. Whatever changes one of them calls it.
func (p *sendPath) rateChanged() {
	s := p.s
	w, rtt := 0.0, time.Duration(0)
	if p.InUse() {
		w, rtt = p.cwin.Value()*s.mss, p.RTT.Min
	}
	if in := (cc.PathRate{WindowBytes: w, MinRTT: rtt}); s.rateIn[p.ID()] != in {
		s.rateIn[p.ID()], s.rateStale = in, true
	}
}

// windowChanged follows a change of the path's congestion window.
func (p *sendPath) windowChanged() {
	w := p.cwin.Packets()
	if c := p.s.c; c.ep.tracer != nil {
		// Under one packet the fraction is the window, as Packets is 1.
		traced := float64(w)
		if v := p.cwin.Value(); v < 1 {
			traced = v
		}
		if traced != p.traced {
			c.trace(TraceEvent{Kind: TraceWindow, Path: int(p.ID()), Value: traced})
			p.traced = traced
		}
	}
	p.window = w
	p.rateChanged()
}

// rttSample adds an RTT sample to the path's estimate. A path's first
// sample changes what the paths not yet sampled borrow (estimate).
func (p *sendPath) rttSample(sample time.Duration) {
	first := p.RTT.Samples == 0
	p.RTT.Update(sample)
	p.rateChanged()
	if first {
		p.s.timeUnsampled()
	}
}
