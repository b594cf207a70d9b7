package engine

import (
	"math"
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// sender is a connection's send side. It cuts posted messages into DSNs,
// sprays them over the paths with PSNs of their own, and resends what is
// lost (spec sections 6.2, 6.5 and 6.6).
type sender struct {
	c *Conn

	// DSNs in flight, from una to nextDSN. The ring holds DSN d at d & mask.
	nextDSN uint32
	una     uint32 // the oldest DSN not acknowledged
	window  uint32 // the most DSNs in flight the peer accepts
	ring    []dsnRecord
	mask    uint32

	// Paths. They are nil until equip.
	paths  []*sendPath
	rrPath int // the path new data tries first
	// pass is the pass of the path new data went on last (pickByRate),
	// and planePaths counts the paths on each plane (pathsOnPlanes).
	pass        float64
	planePaths  []int
	inflightAll int // packets in flight on all paths, the paths' inflight summed
	// oneWay is, by plane, the base of the paths' one-way delays for the
	// delay signal (cc.DelayParams). It is the plane's and not each path's:
	// a path's own least may come from a packet that waited behind the
	// first window, and would take that queue for the path's length.
	oneWay []cc.DelayBase
	// delayBase is oneWay's counterpart for the delay signal alone, which
	// also takes in the handshake's reading (Conn.hsOneWay). Where every
	// sender starts at once, the first packets of the later ones queue
	// behind the others' first windows, and a base from them would read
	// the queue they then hold as none.
	delayBase []cc.DelayBase
	// fullAcked is, by plane, when the newest transmission of a full-sized
	// packet that an ACK reported received was sent (verifyMTU).
	fullAcked []clock.Time
	// planeProbe is, by plane, the ProbeID of the plane probe in flight,
	// 0 for none: a path's new plane (probePlanes) or a home it may go
	// back to (probeHomes). planeT sends the next round of probePlanes
	// while a path is stuck; it is made when first needed.
	// silentPlaneRounds counts the rounds in a row no plane answered, up
	// to 2.
	planeProbe        []uint32
	planeT            clock.Timer
	silentPlaneRounds int
	// homeT probes the home planes of paths that moved off them, once
	// they may move again, and returning counts the paths draining to go
	// home (pathstate.go).
	homeT     clock.Timer
	returning int
	// The search for a shorter plane (longplane.go): when the next may
	// start, the path it is for, and the planes whose probe in flight is
	// the search's.
	shorterAt  clock.Time
	seekFor    *sendPath
	seekPlanes []bool

	// Posted messages, by stream. ready holds every stream that may have
	// data to send, so that nextMessage skips the idle ones.
	streams  []sendStream
	ready    bitset
	rrStream int    // the stream nextMessage tries first
	msgs     int    // messages posted and not completed
	unsent   uint64 // bytes posted and never sent, sent as the Backlog field

	// Recovery. retx holds the DSNs to resend, oldest first from retxHead.
	// cuts holds, from cutsHead, content recut from DSNs whose packets the
	// path MTU no longer lets through, waiting for DSNs of its own.
	retx     []uint32
	retxHead int
	cuts     []cutPiece
	cutsHead int
	// newestAcked is the send time of the newest transmission that the ACK
	// being applied reported received, on any path. newestRTT is its round
	// trip.
	newestAcked clock.Time
	newestRTT   time.Duration
	// deliveredSent is the send time of the newest transmission any ACK
	// reported received (overtaken). probeAnswered is the send time of the
	// newest PROBE the peer answered (peerAnswered).
	deliveredSent clock.Time
	probeAnswered clock.Time
	// tailSeen is the deliveredSent lostAtTail last looked at: it looks
	// again only when a newer transmission was reported received.
	tailSeen clock.Time
	// resentInSilenceFrom is when the peer was last heard before the
	// silence in which a timeout last declared a packet lost
	// (declareOldestOnce). quietTimedOutAt is when a timeout last found the
	// peer quiet, and answersDue when its answers after such a silence are
	// in (hear).
	resentInSilenceFrom clock.Time
	quietTimedOutAt     clock.Time
	answersDue          clock.Time
	// headSeen is the latest transmission of the receive window's head at
	// the last check, with the newest send time any ACK reported received
	// since it went (copyHead): the ACKs after one that showed it passed
	// may report nothing, and the head's timer reads it.
	headSeen headMark
	// late is the longest round trip a spurious timeout revealed, and
	// lateAt when, for the timeouts' floor (see lateFloor).
	late   time.Duration
	lateAt clock.Time

	// Rate. The pacer spaces packets at the windows' rate, times the pacing
	// gain, capped by the receiver's hint. rateIn holds each path's window
	// and minimum RTT (zero for a path out of use), kept up to date as the
	// paths change, so that pacing a packet reads one short slice and not
	// every path. windowRate is the rate they give, computed again only
	// when rateStale.
	pacer      cc.Pacer
	paceT      clock.Timer // wakes the sender when the pacer lets the next packet go
	headT      clock.Timer // wakes it when the window's head is due for a copy (copyHead)
	portT      clock.Timer // wakes the sender when a busy port can take new data; made when first needed
	hint       float64     // the receiver's rate hint in bytes a second; +Inf for none
	mss        float64     // payload bytes of a full packet
	nicShare   *cc.Member  // this connection in the endpoint's OutboundCapacity allocation; nil without one
	host       hostRate    // the rate the local host's queues let out, learned from its drops (localdrop.go)
	hostCutBy  int         // the plane whose drops made every cut to host since it last limited nothing; -1 for none or several
	rateIn     []cc.PathRate
	windowRate float64
	rateStale  bool
	// started is set once the windows no longer wait for the start from
	// the receiver's share (startFromHint).
	started bool
	// startRTT is the round trip the windows fit at the start
	// (startFromHint): 0 before it, where the start gave up, or where the
	// receiver is the bottleneck. fitted marks the planes whose own least
	// round trip was compared with it since (fitLongPlane).
	startRTT time.Duration
	fitted   []bool
	// train is when the first ACK that acknowledged data came, and the
	// packets acknowledged by then (startFromHint). firstSent and lastSent
	// span the sending of the packets acknowledged since.
	train struct {
		at                  clock.Time
		acked               uint64
		firstSent, lastSent clock.Time
	}
	// delivery is the rate the peer acknowledges packets at, taken over
	// intervals of at least a round trip (sampleDelivery). The interval
	// under way began at at, when the paths had acked transmissions
	// reported received; rate is bytes a second, a moving average over the
	// intervals closed.
	delivery struct {
		at    clock.Time
		acked uint64
		rate  float64
	}
	// heard is set by the first ACK. Until then the connection sends no
	// more than its first window (firstWindow), which a path's window of
	// at least one would exceed with more paths than that.
	heard bool
	// grantUntil is when the grant that a rise of the receiver's share
	// opened ends (shareRose).
	grantUntil clock.Time
	// first is the first window in packets when the handshake set it
	// (openFirstWindow), 0 while it is cc.DefaultWindow.Initial.
	first int

	// Refused DSNs. waiting holds the DSNs refused with a retryable NACK,
	// and retry fires when the next of them may go again.
	waiting []uint32
	retry   clock.Timer

	// READs. reads holds this side's READs as requester, by tag. READ
	// responses, as responder, go out on the internal stream respStream.
	reads       map[uint32]*message
	nextTag     uint32
	readsActive int // READ_REQs and atomics sent whose response has not all arrived
	respStream  int

	ports pathmgr.Ports // how the paths take source ports
	stats SenderStats
	// loss is the random loss the connection's ACK records show (loss.go).
	loss randomLoss

	creditT     clock.Timer // the credit wait (credit.go), made when a stream is first held
	creditWaits int         // credit waits in a row that no new limit ended
	held        bitset      // the streams held for receive credit
}

func (s *sender) init(c *Conn) {
	s.c = c
	s.nextDSN, s.una = c.idsn, c.idsn
	s.window = uint32(min(c.peerWindow, c.ep.cfg.MaxSendWindow))
	s.streams = make([]sendStream, c.streams+1) // the last one carries READ responses
	s.ready = newBitset(len(s.streams))
	s.respStream = c.streams
	if c.credits {
		// Before the receiver names a stream, its first SEND or WRITE_IMM
		// may go, and no other (spec section 6.5). A stream the receiver
		// cannot name has no limit.
		s.held = newBitset(len(s.streams))
		for k := range min(c.streams, proto.NoCreditStream) {
			s.streams[k].limited, s.streams[k].limit = true, 1
		}
	}
	s.reads = map[uint32]*message{}
	s.retry = c.ep.clock.NewTimer(s.onRetry)
	s.paceT = c.ep.clock.NewTimer(s.onPace)
	s.headT = c.ep.clock.NewTimer(s.onHeadTimer)
	if a := c.ep.outAlloc; a != nil {
		s.nicShare = a.Member(c.localID)
	}
	s.hint = math.Inf(1)
	s.host.lift()
	s.hostCutBy = -1
	s.rateStale = true
	c.setSendMax(c.sendMax)
}

// equip gives the sender its DSN ring and its paths. Only sending needs
// them, so they are made at the first work posted or READ to answer, or
// when something asks about the paths. That may be a plane going down or
// up, telemetry, an ACK with path records, a NACK, a probe reply, or the
// baseline receiver spacing its NAKs by the path's RTO. Until then pump
// sends nothing, since there is nothing to send.
//
// Most ends of the connections of a large simulation, or of a server, only
// receive, and equipping every end at the handshake costs memory and set-up
// time. The paths start as they would have at the handshake, because what
// they are made from is fixed by then. So equipping late changes nothing
// else.
func (s *sender) equip() {
	if s.paths != nil { // nil until equipped; Config.fill ensures a connection has a path
		return
	}
	c := s.c
	// The DSN ring starts small and doubles when it fills, up to the
	// window. Thousands of connections that each have a few packets in
	// flight must not each hold a window's worth.
	n := 1
	for n < min(int(s.window), initialRing) {
		n *= 2
	}
	s.ring, s.mask = make([]dsnRecord, n), uint32(n-1)
	s.rateIn = make([]cc.PathRate, c.paths)
	cfg := &c.ep.cfg
	s.ports = pathmgr.Ports{Pool: cfg.SourcePorts, Stride: c.paths, MPL: cfg.MPL}
	// Pacing and path choice look at every path for each packet. The paths,
	// their windows and their first ring slots are therefore each one
	// allocation, side by side, rather than one per path.
	s.oneWay = make([]cc.DelayBase, len(cfg.Planes))
	s.delayBase = make([]cc.DelayBase, len(cfg.Planes))
	s.takeHandshakeDelay()
	s.fullAcked = make([]clock.Time, len(cfg.Planes))
	paths := make([]sendPath, c.paths)
	windows := make([]cc.Window, c.paths)
	rings := make([]sendRec, c.paths*minPathRing)
	planes := c.dealtPlanes()
	for i := 0; i < c.paths; i++ {
		wp := c.tp.window(c)
		windows[i] = *cc.NewWindow(wp, c.isn)
		p := &paths[i]
		*p = sendPath{s: s, ring: rings[i*minPathRing : (i+1)*minPathRing : (i+1)*minPathRing],
			next: c.isn, oldest: c.isn, cwin: &windows[i]}
		p.home = planes(i)
		p.Init(uint8(i), p.home, &s.ports, c.isn, p)
		p.window = p.cwin.Packets()
		p.timer = c.ep.clock.NewTimer(p.onTimer)
		s.paths = append(s.paths, p)
		p.rateChanged()
	}
	c.startMTUSearch()
	s.openFirstWindow()
}

// takeHandshakeDelay seeds the delay signal's base of the plane the
// handshake's reading was taken on, once the sender is equipped and the
// connection established.
func (s *sender) takeHandshakeDelay() {
	c := s.c
	if s.delayBase != nil && c.hsOneWayOK && c.hsOneWayPlane < len(s.delayBase) {
		s.delayBase[c.hsOneWayPlane].Queue(c.hsOneWay)
		c.hsOneWayOK = false
	}
}

func (s *sender) busy() bool { return s.msgs > 0 }

// pump sends what the windows allow. Retransmissions go first, then new data
// sprayed over the paths.
func (s *sender) pump() {
	if s.c.state != Established || s.paths == nil {
		return // not established yet, or nothing ever posted (see equip)
	}
	if s.returning > 0 {
		s.returnHomes()
	}
	for s.c.tp.sendOne(s) {
	}
}

// sendSprayed is multipath's sendOne. A retransmission goes first, on the
// path Config.Resend chooses (pickPath). Otherwise
// new data goes on the next usable path, round robin, within the pacer's
// rate.
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
			s.waitForPort()
			return false
		}
		lostOn := -1
		if int(r.path) < len(s.paths) {
			lostOn = s.paths[r.path].Plane()
		}
		s.popRetx()
		r.queued = false
		// Resends are not charged to the pacer. The rate, and the
		// receiver's hint, budget new data, and a packet lost before the
		// bottleneck used none of it. The windows still bound what is in
		// flight. While the local host's queues limit the rate, though,
		// every packet passes them, resends too. And a packet of a first
		// window of one BDP lost while the receiver was the bottleneck
		// was lost where N such windows overflowed its queue: its resend
		// takes the receiver's capacity as new data does.
		s.transmit(d, r, p, true, false)
		if s.host.limited() || r.overflowed {
			s.paced(int(r.n))
		}
		if s.unsent == 0 {
			// At the tail nothing follows the resend. If it were lost too,
			// finding out would cost another round of probing. So copies
			// go as a probe's do, avoiding the plane that lost the packet
			// when they can (copyAtTail).
			s.copyAtTail(d, r, p, lostOn, false)
		}
		s.probeOverdue(s.c.ep.clock.Now()) // at the tail the resend may be its path's last packet
		return true
	}
	if s.nextDSN-s.una >= s.window || s.hint <= 0 {
		return false // the DSN window is full, or the receiver said stop
	}
	if !s.heard && s.inflightAll >= s.firstWindow() {
		return false // the first window is the connection's, however many paths share it
	}
	// Pieces recut from earlier DSNs go before new messages: their
	// messages are the oldest.
	var m *message
	if !s.cutWaiting() {
		if m = s.nextMessage(); m == nil {
			return false
		}
	}
	p := s.pickPath(-1)
	if p == nil {
		s.waitForPort()
		return false
	}
	var r *dsnRecord
	if m != nil {
		r = s.newDSN(m)
	} else {
		r = s.newCutDSN()
	}
	s.transmit(s.nextDSN-1, r, p, false, false)
	s.paced(int(r.n)) // the hint is a rate of payload, so the budget counts payload too
	return true
}

// newForProbe cuts the next new DSN for p's tail probe (tailProbe), where
// new data may go on p now but for its window, and returns it with its
// record; otherwise it returns a nil record. Resends waiting for room do
// not hold it back: they wait on paths of their own choosing (pickPath),
// and the probe goes on p. The probe is due now, so the pacer does not
// hold it; it is charged to it as new data is (tailProbe), and the packets
// after it wait that much longer. It takes its turn of the spray by rate
// (its pass), without the queue weight near the end (queueWeight) or the
// weight of a path in SKIP (skipWeight): the probe is due on p whatever
// its route's state.
func (s *sender) newForProbe(p *sendPath) (uint32, *dsnRecord) {
	if !s.heard || s.nextDSN-s.una >= s.window || s.hint <= 0 {
		return 0, nil
	}
	now := s.c.ep.clock.Now()
	ports := s.c.ep.ports
	if !s.carries(p, now, true) || !p.ringRoom() || !ports.ready(p.Plane(), now) || !shortEnough(p, s.tailCut(now)) {
		return 0, nil
	}
	var r *dsnRecord
	if s.cutWaiting() {
		r = s.newCutDSN()
	} else if m := s.nextMessage(); m != nil {
		r = s.newDSN(m)
	} else {
		return 0, nil
	}
	if ports.rated() {
		p.pass = max(p.pass, s.pass) + s.stride(p.Plane())
	}
	return s.nextDSN - 1, r
}

// waitForPort wakes the sender when the first port that holds back a path
// with room can take new data again, or a path's window under one packet
// lets it send (spacedAt). Without it, a sender whose paths all wait on
// busy ports or gaps would wait for an ACK, and one with nothing in flight
// would wait for ever.
func (s *sender) waitForPort() {
	ports := s.c.ep.ports
	now := s.c.ep.clock.Now()
	at := clock.Never
	for _, p := range s.paths {
		if !s.carries(p, now, true) || !p.roomy() {
			continue
		}
		ready := max(p.spacedAt(), now)
		if !ports.ready(p.Plane(), now) {
			ready = max(ready, ports.readyAt(p.Plane()))
		}
		if ready > now {
			at = min(at, ready)
		}
	}
	if at == clock.Never {
		return
	}
	if s.portT == nil {
		s.portT = s.c.ep.clock.NewTimer(func() {
			s.pump()
			s.c.ep.flush()
		})
	}
	if d := s.portT.Deadline(); d == clock.Never || at < d {
		s.portT.Reset(at)
	}
}

// transmit sends DSN d's content on path p with the path's next PSN.
func (s *sender) transmit(d uint32, r *dsnRecord, p *sendPath, retx, probe bool) {
	most := s.payloadMax(r.msg.typ)
	if s.c.recut && r.n > most {
		s.recut(r, most) // the path MTU fell below the packet since it was cut
	}
	now := s.c.ep.clock.Now()
	s.c.ep.ports.sent(p.Plane(), int(r.n), now)
	psn := p.next
	if psn-p.oldest == uint32(len(p.ring)) {
		p.growRing() // the ring is full, and ringRoom said it may grow
	}
	p.next++
	p.AgeEpochs(p.next)
	rec := p.slot(psn)
	*rec = sendRec{psn: psn, dsn: d, sentAt: now, full: r.n >= most, retx: retx, first: s.first > 0 && !s.heard}
	p.took(rec)
	p.silent++
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
	// the packet fills the path's window. Otherwise a sender with a small
	// window would wait out the receiver's ACK coalescing with nothing to
	// send. The window counts every packet in flight here, those of a
	// first window that held leaves out too: past it, each packet's
	// acknowledgment shows sooner which of that window were lost.
	if r.off+r.n == m.length || m.typ.IsRequest() || probe || p.inflight >= p.window {
		flags |= proto.FlagAckRequest
	}
	if retx {
		flags |= proto.FlagRetransmit
	}
	if m.wr.Solicited && (m.typ == proto.TypeSend || m.typ == proto.TypeWriteImm) {
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
	case proto.TypeFetchAdd, proto.TypeCmpSwap:
		a := pkt.Atomic()
		a.SetStream(m.wr.Stream)
		a.SetMSN(m.msn)
		a.SetRKey(m.wr.RKey)
		a.SetRemoteOffset(m.wr.RemoteOffset)
		if m.typ == proto.TypeFetchAdd {
			a.SetOperand(m.wr.Add)
		} else {
			a.SetOperand(m.wr.Swap)
			a.SetCompare(m.wr.Compare)
		}
		a.SetAtomicTag(m.tag)
	case proto.TypeAtomicResp:
		a := pkt.AtomicResp()
		a.SetAtomicTag(m.tag)
		a.SetOriginal(m.original)
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
