package engine

import (
	"math"
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

type sender struct {
	c        *Conn
	nextDSN  uint32
	una      uint32 // oldest DSN not acknowledged
	window   uint32
	ring     []dsnRecord
	mask     uint32
	paths    []*sendPath
	ports    pathmgr.Ports // how the paths take source ports
	streams  []sendStream
	ready    bitset   // streams that may have data to send: every one that has is in it
	retx     []uint32 // DSNs to resend, oldest first from retxHead
	retxHead int
	pacer    cc.Pacer
	paceT    clock.Timer // wakes the sender when the pacer lets the next packet go
	nicShare *cc.Member  // in the endpoint's OutboundCapacity allocation; nil without one
	hint     float64     // the receiver's rate hint, bytes/s (+Inf: none)
	mss      float64     // payload bytes of a full packet
	// The pacing rate's inputs, per path (window bytes, minimum RTT; 0 for
	// a path out of use), kept as the paths change so that a packet's
	// pacing reads one short array, not every path's state; and the rate
	// they give, computed again only after one of them changed.
	rateIn     []cc.PathRate
	windowRate float64
	rateStale  bool
	rrStream   int
	rrPath     int
	// newestAcked is the send time of the newest transmission an ACK being
	// applied reported received, on any path, and newestRTT its round trip.
	newestAcked clock.Time
	newestRTT   time.Duration
	inflightAll int    // packets in flight on all paths: the paths' inflight summed
	msgs        int    // messages posted and not completed
	unsent      uint64 // bytes posted and never sent: the Backlog field
	stats       SenderStats

	waiting     []uint32 // DSNs refused with a retryable NACK
	retry       clock.Timer
	reads       map[uint32]*message // READs outstanding as requester, by tag
	nextTag     uint32
	readsActive int // READ_REQs sent whose data has not all arrived
	respStream  int // the internal stream READ responses go out on
}

func (s *sender) init(c *Conn) {
	s.c = c
	s.nextDSN, s.una = c.idsn, c.idsn
	s.window = uint32(min(c.peerWindow, c.ep.cfg.MaxSendWindow))
	s.streams = make([]sendStream, c.streams+1) // the last: READ responses
	s.ready = newBitset(len(s.streams))
	s.respStream = c.streams
	s.reads = map[uint32]*message{}
	s.retry = c.ep.clock.NewTimer(s.onRetry)
	s.paceT = c.ep.clock.NewTimer(s.onPace)
	if a := c.ep.outAlloc; a != nil {
		s.nicShare = a.Member(c.localID)
	}
	s.hint = math.Inf(1)
	s.rateStale = true
	hlen, _ := proto.HeaderLen(proto.TypeWrite, 0)
	s.mss = float64(c.maxPacket - hlen - proto.TrailerLen)
}

// equip gives the sender its ring of DSNs and its paths, which only
// sending needs: at the first work posted or READ to answer, or when
// something asks after its paths (a plane going down or up, telemetry, an
// ACK with path records, a NACK, a probe reply, the baseline receiver's
// spacing of its NAKs by the path's RTO). Until then pump sends nothing
// (there is nothing to send). Most ends of the connections of a large
// simulation, or of a server, only receive: with 4,032 connections,
// equipping every end at the handshake was a quarter of the heap and of
// the set-up's time. The paths start as they would have at the handshake,
// whenever that is (what they are made from is fixed by then), so
// equipping late changes nothing else.
func (s *sender) equip() {
	if s.paths != nil { // nil until equipped: a connection has a path at least (Config.fill)
		return
	}
	c := s.c
	// The ring of DSNs in flight starts small and doubles, up to the
	// window, when it fills: thousands of connections that each have a
	// few packets in flight must not each hold a window's worth.
	n := 1
	for n < min(int(s.window), initialRing) {
		n *= 2
	}
	s.ring, s.mask = make([]dsnRecord, n), uint32(n-1)
	s.rateIn = make([]cc.PathRate, c.paths)
	cfg := &c.ep.cfg
	s.ports = pathmgr.Ports{Pool: cfg.SourcePorts, Stride: c.paths, MPL: cfg.MPL}
	// A packet's pacing and path choice look at every path: their state,
	// windows and first ring slots are each one allocation, side by side,
	// not one per path.
	paths := make([]sendPath, c.paths)
	windows := make([]cc.Window, c.paths)
	rings := make([]sendRec, c.paths*minPathRing)
	for i := 0; i < c.paths; i++ {
		wp := c.tp.window(c)
		windows[i] = *cc.NewWindow(wp, c.isn)
		p := &paths[i]
		*p = sendPath{s: s, ring: rings[i*minPathRing : (i+1)*minPathRing : (i+1)*minPathRing],
			next: c.isn, oldest: c.isn, cwin: &windows[i]}
		p.Init(uint8(i), i%len(cfg.Planes), &s.ports, c.isn, p)
		p.window = p.cwin.Packets()
		p.timer = c.ep.clock.NewTimer(p.onTimer)
		s.paths = append(s.paths, p)
		p.rateChanged()
	}
}

func (s *sender) busy() bool { return s.msgs > 0 }

// pump sends what the windows allow: retransmissions first, then new data
// sprayed over the paths.
func (s *sender) pump() {
	if s.c.state != Established || s.paths == nil {
		return // not yet, or nothing ever posted (equip)
	}
	for s.c.tp.sendOne(s) {
	}
}

// sendSprayed is multipath's sendOne: a retransmission first, on the
// usable path with the shortest RTT off the plane that lost it, else new
// data on the next usable path, round robin, within the pacer's rate.
func (s *sender) sendSprayed() bool {
	if !s.c.ep.cfg.NoPacing {
		if ok, at := s.pacer.Ready(int64(s.c.ep.clock.Now())); !ok {
			if s.paceT.Deadline() != clock.Time(at) {
				s.paceT.Reset(clock.Time(at))
			}
			return false
		}
	}
	for s.retxHead < len(s.retx) {
		d := s.retx[s.retxHead]
		r := s.record(d)
		if r == nil || r.acked || !r.queued {
			s.popRetx()
			continue
		}
		p := s.pickPath(int(r.path))
		if p == nil {
			return false
		}
		lostOn := -1
		if int(r.path) < len(s.paths) {
			lostOn = s.paths[r.path].Plane()
		}
		s.popRetx()
		r.queued = false
		// Resends are not charged to the pacer: the rate (and the receiver's
		// hint) budgets new data, and a packet lost before the bottleneck
		// took none of it. The windows still bound what is in flight.
		s.transmit(d, r, p, true, false)
		if s.unsent == 0 {
			// At the tail nothing follows the resend either: lost, it
			// would cost another round of probing. A copy goes on another
			// plane, as a probe's does (not the one it was lost on, if it
			// can).
			s.copyOnOtherPlane(d, r, p, lostOn, false)
		}
		s.probeOverdue(s.c.ep.clock.Now()) // at the tail it may be its path's last packet
		return true
	}
	if s.nextDSN-s.una >= s.window || s.hint <= 0 {
		return false // the DSN window is full, or the receiver said stop
	}
	m := s.nextMessage()
	if m == nil {
		return false
	}
	p := s.pickPath(-1)
	if p == nil {
		return false
	}
	r := s.newDSN(m)
	s.transmit(s.nextDSN-1, r, p, false, false)
	s.paced(int(r.n)) // the hint is a rate of payload: so is the budget
	return true
}

// usable reports whether p can take a packet now: GOOD (or, with skip,
// SKIP), room in its window and in its ring (refused packets leave holes
// behind an unresolved oldest PSN), and the peer's address on its plane
// known.
func (s *sender) usable(p *sendPath, skip bool) bool {
	return p.Ready(s.c.ep.clock.Now(), skip) && p.inflight < p.window && p.ringRoom() && s.c.knows(p.Plane())
}

// onPace is the pacer's wake-up.
func (s *sender) onPace() {
	s.pump()
	s.c.ep.flush()
}

// paced accounts a transmission of bytes to the pacer at the sender's rate.
func (s *sender) paced(bytes int) {
	if s.c.ep.cfg.NoPacing {
		return
	}
	if s.rateStale {
		s.windowRate, s.rateStale = cc.WindowRate(s.rateIn), false
	}
	now := int64(s.c.ep.clock.Now())
	wr := s.windowRate
	rate := cc.Rate(wr, s.hint)
	if m := s.nicShare; m != nil {
		// The endpoint's NIC is shared: this connection wants what its
		// windows and its receiver allow (not the pacing gain, which only
		// spaces packets) and gets at most the max-min share of the NIC.
		// One with nothing more to send leaves the share to the others.
		if s.unsent == 0 {
			m.Leave()
		} else {
			m.ObserveDemand(math.Min(wr, s.hint), bytes, now)
			rate = min(rate, m.Share())
		}
	}
	s.pacer.Sent(now, bytes, rate)
}

// pickPath chooses a path for a packet. New data (lost < 0) is sprayed
// round robin over the usable paths. A retransmission goes to the usable
// path other than the one that lost it with the lowest smoothed RTT, or
// back to that one if no other can take it.
func (s *sender) pickPath(lost int) *sendPath {
	// Clear paths first; paths in SKIP (a CE mark was just seen) only when
	// no clear one can take the packet.
	for _, skip := range [2]bool{false, true} {
		if lost < 0 {
			for i := 0; i < len(s.paths); i++ {
				p := s.paths[(s.rrPath+i)%len(s.paths)]
				if s.usable(p, skip) {
					s.rrPath = int(p.ID()) + 1
					return p
				}
			}
			continue
		}
		// Losses on a plane come together (a burst on one of its links, a
		// link failing): a resend goes to another plane when one can take
		// it, the path with the shortest RTT there.
		var best *sendPath
		lostPlane := -1
		if lost < len(s.paths) {
			lostPlane = s.paths[lost].Plane()
		}
		for _, otherPlane := range [2]bool{true, false} {
			for _, p := range s.paths {
				if int(p.ID()) == lost || !s.usable(p, skip) || otherPlane && p.Plane() == lostPlane {
					continue
				}
				if best == nil || p.RTT.Samples > 0 && (best.RTT.Samples == 0 || p.RTT.SRTT < best.RTT.SRTT) {
					best = p
				}
			}
			if best != nil {
				break
			}
		}
		if best == nil && lost < len(s.paths) && s.usable(s.paths[lost], skip) {
			best = s.paths[lost]
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// transmit sends DSN d's content on path p with the path's next PSN.
func (s *sender) transmit(d uint32, r *dsnRecord, p *sendPath, retx, probe bool) {
	now := s.c.ep.clock.Now()
	psn := p.next
	if psn-p.oldest == uint32(len(p.ring)) {
		p.growRing() // full: ringRoom said it may grow
	}
	p.next++
	*p.slot(psn) = sendRec{psn: psn, dsn: d, sentAt: now}
	p.took()
	r.path, r.psn = p.ID(), psn
	s.emitData(d, r, p, psn, retx, probe)
}

// emitData builds and sends DSN d's content on path p with PSN psn.
func (s *sender) emitData(d uint32, r *dsnRecord, p *sendPath, psn uint32, retx, probe bool) {
	c := s.c
	now := c.ep.clock.Now()
	m := r.msg
	var pkt proto.Packet
	c.build(&pkt, m.typ, 0, int(r.n))
	h := pkt.Common
	h.SetPathID(p.ID())
	h.SetEpoch(p.Epoch())
	h.SetDstConnID(c.peerID)
	h.SetPSN(psn)
	h.SetDSN(d)
	h.SetBacklog(proto.EncodeBacklog(s.unsent))
	var flags proto.Flags
	// Ask for an ACK at once at the end of a message, on a probe, and when
	// the packet fills the path's window: a sender with a small window would
	// otherwise wait out the receiver's ACK coalescing with nothing to send.
	if r.off+r.n == m.length || m.typ == proto.TypeReadReq || probe || p.inflight >= p.window {
		flags |= proto.FlagAckRequest
	}
	if retx {
		flags |= proto.FlagRetransmit
	}
	if m.wr.Solicited && m.typ != proto.TypeWrite {
		flags |= proto.FlagSolicited
	}
	h.SetFlags(flags)
	switch m.typ {
	case proto.TypeWrite, proto.TypeWriteImm:
		w := pkt.Write()
		w.SetRKey(m.wr.RKey)
		w.SetRemoteOffset(m.wr.RemoteOffset)
		w.SetMsgLen(m.length)
		w.SetMsgOffset(r.off)
		w.SetStream(m.wr.Stream)
		w.SetMSN(m.msn)
		if m.typ == proto.TypeWriteImm {
			pkt.Imm().SetRSN(m.rsn)
			pkt.Imm().SetImmediate(m.wr.Imm)
		}
	case proto.TypeSend:
		sh := pkt.Send()
		sh.SetStream(m.wr.Stream)
		sh.SetMSN(m.msn)
		sh.SetRSN(m.rsn)
		sh.SetMsgLen(m.length)
		sh.SetMsgOffset(r.off)
	case proto.TypeReadReq:
		rq := pkt.ReadReq()
		rq.SetStream(m.wr.Stream)
		rq.SetMSN(m.msn)
		rq.SetRKey(m.wr.RKey)
		rq.SetRemoteOffset(m.wr.RemoteOffset)
		rq.SetMsgLen(m.length)
		rq.SetReadTag(m.tag)
	case proto.TypeReadResp:
		rs := pkt.ReadResp()
		rs.SetReadTag(m.tag)
		rs.SetMsgOffset(r.off)
		rs.SetMsgLen(m.length)
	}
	if !s.copyPayload(m, r, pkt.Payload) {
		return
	}
	c.emit(&pkt, p.Plane(), p.Port())
	if c.ep.tracer != nil {
		c.trace(TraceEvent{Kind: TraceSent, Path: int(p.ID()), PSN: psn, DSN: d, Bytes: int(r.n), Retransmit: retx, Probe: probe})
	}
	p.Counters.PacketsSent++
	p.Counters.BytesSent += uint64(r.n)
	s.stats.Packets++
	if retx {
		p.Counters.Retransmits++
		s.stats.Retransmits++
	}
	if p.timer.Deadline() == clock.Never {
		p.armTimer(now)
	}
}
