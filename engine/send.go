package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// message is a posted WRITE, WRITE_IMM or SEND on its way out. What each
// of its packets reads lies in its first two lines: its own progress
// first, then the request, whose stream is in the first line and whose
// target and immediate in the second. A message is four whole lines
// (messageSize: allocated on a line, it lies across no more of them;
// TestMessageIsWholeLines, on 64-bit machines).
type message struct {
	unacked int // DSNs of it sent and not yet acknowledged
	length  uint32
	msn     uint32
	rsn     uint32
	seg     uint32 // payload bytes per packet
	next    uint32 // offset of the next first transmission
	typ     proto.Type
	allSent bool
	done    bool // acknowledged, or failed
	failed  bool // reported already with an error status
	wr      SendWR
	list    sgl    // the local buffers
	one     [1]SGE // list's storage when the request has one buffer

	// READ requester: the tag, and the response bytes arrived.
	tag      uint32
	readGot  uint32
	readDone bool
	// READ responder (typ READ_RESP, internal): the region read from.
	srcKey   uint64
	srcOff   uint64
	internal bool // no completion for the application
}

// finished reports whether every part of the message is done: every DSN
// acknowledged and, for a READ, every response byte arrived.
func (m *message) finished() bool {
	return m.allSent && m.unacked == 0 && (m.typ != proto.TypeReadReq || m.readDone)
}

// dsnRecord is what the sender keeps per DSN in flight: where its content
// lies (no copy of the payload: a retransmission is rebuilt from the source
// region) and its latest transmission.
type dsnRecord struct {
	msg      *message
	off      uint32
	n        uint32
	acked    bool
	queued   bool       // in the retransmit queue
	waiting  bool       // refused with RNR or RESOURCE: resend at retryAt
	refusals uint8      // how often: each doubles the wait
	retryAt  clock.Time //
	path     uint8      // latest transmission
	psn      uint32
}

// sendRec is one transmission on a path: the ring entry of its PSN.
type sendRec struct {
	psn      uint32 // which PSN the slot holds
	dsn      uint32
	sentAt   clock.Time
	resolved bool // acknowledged, declared lost, or refused
}

// sendPath is the sender's state of one path, laid out by what reads it
// (with thousands of connections a path's state has left the caches since
// its last packet, and each line is one to fetch): a packet sent reads
// lines 0, 1 and 3, an ACK's record of the path lines 0 to 3.
type sendPath struct {
	// Line 0: what checking whether a path can take a packet reads
	// (usable), and the path's number. (sendPathSize keeps a path a
	// whole number of lines; TestSendPathIsWholeLines, on 64-bit
	// machines.)
	ring     []sendRec // PSN psn in slot psn & (len - 1): 4 slots, doubled as needed up to 256
	next     uint32    // next PSN
	oldest   uint32    // oldest PSN not resolved
	inflight int
	window   int
	plane    int
	state    pathmgr.State
	epoch    uint8
	port     uint16
	probed   bool  // a tail probe went out since the last acknowledgment
	id       uint8 // its index in the sender's paths (at most 256)
	timeouts uint8 // consecutive retransmission timeouts (saturating)
	// Line 1: what sending on the path and its ACKs read next: its
	// window, its timer and the round trip the timer is armed from.
	s     *sender
	cwin  *cc.Window
	timer clock.Timer
	rtt   pathmgr.RTT
	// Line 2: what the path's ACKs read besides.
	epochStart [4]uint32 // first PSN of each epoch value's latest use
	ce         uint32    // the receiver's CE count for the path, as last reported
	probeID    uint32
	// Loss as the path's own ACKs report it, over rounds of lossRound
	// packets: this round's counts and the rounds' smoothed loss fraction
	// (-1: no round yet). Losses a timeout or a failed plane declares are
	// not the route's loss rate and do not count.
	roundAcked, roundLost int
	lossAvg               float64
	portIndex             int        // into Config.SourcePorts
	skipUntil             clock.Time // a SKIP path turns GOOD again after this, without news
	// Lines 3 and 4: the counters, the packets sent and acknowledged
	// among the first seven.
	ctr        pathmgr.Counters
	repathedAt clock.Time
}

// sendStream is one stream's outgoing messages, in MSN order.
type sendStream struct {
	msn, rsn uint32
	queue    []*message // from head: not yet completed
	head     int
	sendIdx  int // first message with bytes never sent
	// refused counts the stream's DSNs the receiver refused (RNR,
	// RESOURCE) and has not acknowledged since. While there are any, the
	// stream sends no new data, which would be refused for the same reason
	// (no receive posted, no room). The oldest of them, probe, is resent
	// after the receiver's RetryAfter (backed off) to find out when it is
	// ready; the others wait (retryAt Never) until it is accepted, as
	// RoCE's RNR retry goes back to the oldest refused PSN: a receiver that
	// stays unready costs one packet per retry, not one per refused packet.
	refused int
	probing bool
	probe   uint32
}

// SenderStats counts a connection's sending.
type SenderStats struct {
	Packets     uint64 // data packets sent, retransmissions included
	Retransmits uint64 // of which retransmissions (gap, timeout, tail probe, retry, copy)
	TailProbes  uint64
	Copies      uint64 // retransmissions sent twice (a transfer's tail, the DSN holding the window): the second, on another plane
	Timeouts    uint64
	LossRepaths uint64 // paths moved to a new source port because their loss stood out
	Nacks       uint64 // retryable NACKs received
	BadAcks     uint64 // ACK records that named no path or PSN of ours
}

type sender struct {
	c        *Conn
	nextDSN  uint32
	una      uint32 // oldest DSN not acknowledged
	window   uint32
	ring     []dsnRecord
	mask     uint32
	paths    []*sendPath
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
	// A packet's pacing and path choice look at every path: their state,
	// windows and first ring slots are each one allocation, side by side,
	// not one per path.
	paths := make([]sendPath, c.paths)
	windows := make([]cc.Window, c.paths)
	rings := make([]sendRec, c.paths*minPathRing)
	for i := 0; i < c.paths; i++ {
		// The connection starts with DefaultWindow.Initial packets in all,
		// spread over its paths: a burst of one window, not one per path,
		// before the first acknowledgment (and the receiver's hint) comes.
		wp := cc.DefaultWindow
		wp.Max = float64(cfg.PathWindow)
		wp.Initial = min(max(wp.Min, math.Ceil(wp.Initial/float64(c.paths))), wp.Max)
		if c.isBaseline() {
			// Go-back-N's window is fixed before the run; DCQCN sets the rate.
			w := float64(cfg.BaselineWindow)
			wp.Initial, wp.Min, wp.Max = w, w, w
		}
		windows[i] = *cc.NewWindow(wp, c.isn)
		p := &paths[i]
		*p = sendPath{s: s, id: uint8(i), lossAvg: -1, plane: i % len(cfg.Planes), portIndex: i % len(cfg.SourcePorts),
			ring: rings[i*minPathRing : (i+1)*minPathRing : (i+1)*minPathRing], next: c.isn, oldest: c.isn, cwin: &windows[i]}
		p.window = p.cwin.Packets()
		p.port = cfg.SourcePorts[p.portIndex]
		p.epochStart[0] = c.isn
		p.timer = c.ep.clock.NewTimer(p.onTimer)
		s.paths = append(s.paths, p)
		p.rateChanged()
	}
}

func (s *sender) busy() bool { return s.msgs > 0 }

// record returns the record of DSN d if d is in flight.
func (s *sender) record(d uint32) *dsnRecord {
	if d-s.una >= s.nextDSN-s.una {
		return nil
	}
	return &s.ring[d&s.mask]
}

// post queues a work request after checking it.
func (s *sender) post(wr SendWR) error {
	c := s.c
	var typ proto.Type
	switch wr.Op {
	case OpWrite:
		typ = proto.TypeWrite
	case OpWriteImm:
		typ = proto.TypeWriteImm
	case OpSend:
		typ = proto.TypeSend
	case OpRead:
		typ = proto.TypeReadReq
		if c.readsOut == 0 {
			return fmt.Errorf("engine: READ not allowed: the peer serves none")
		}
	default:
		return fmt.Errorf("engine: cannot post %v on the send side", wr.Op)
	}
	if int(wr.Stream) >= c.streams {
		return fmt.Errorf("engine: stream %d: the connection has %d", wr.Stream, c.streams)
	}
	m := &message{wr: wr, typ: typ}
	m.list = gatherList(wr.Local, wr.SGL, &m.one)
	var need memreg.Access
	if typ == proto.TypeReadReq {
		need = memreg.LocalWrite // the READ's data lands there
	}
	length, err := m.list.check(c.pd, need)
	if err != nil {
		return err
	}
	m.length = length
	hlen, _ := proto.HeaderLen(typ, 0)
	st := &s.streams[wr.Stream]
	m.msn, m.seg = st.msn, uint32(c.maxPacket-hlen-proto.TrailerLen)
	st.msn++
	switch typ {
	case proto.TypeSend, proto.TypeWriteImm:
		m.rsn = st.rsn
		st.rsn++
	case proto.TypeReadReq:
		m.tag = s.nextTag
		s.nextTag++
		s.reads[m.tag] = m
	}
	s.equip()
	st.queue = append(st.queue, m)
	s.ready.set(int(wr.Stream))
	s.msgs++
	if typ != proto.TypeReadReq {
		s.unsent += uint64(m.length)
	}
	return nil
}

// queueResponse queues the READ_RESP packets answering a READ_REQ: the
// responder's own data, in its own sequence spaces, on the internal stream.
func (s *sender) queueResponse(rkey, roff uint64, length, tag uint32) {
	s.equip()
	hlen, _ := proto.HeaderLen(proto.TypeReadResp, 0)
	m := &message{length: length, typ: proto.TypeReadResp, tag: tag,
		srcKey: rkey, srcOff: roff, internal: true, seg: uint32(s.c.maxPacket - hlen - proto.TrailerLen)}
	st := &s.streams[s.respStream]
	st.queue = append(st.queue, m)
	s.ready.set(s.respStream)
	s.msgs++
	s.unsent += uint64(length)
	s.c.madeProgress(false)
}

// pump sends what the windows allow: retransmissions first, then new data
// sprayed over the paths.
func (s *sender) pump() {
	if s.c.state != Established || s.paths == nil {
		return // not yet, or nothing ever posted (equip)
	}
	for s.sendOne() {
	}
}

func (s *sender) sendOne() bool {
	if s.c.isBaseline() {
		return s.sendBaseline()
	}
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
			lostOn = s.paths[r.path].plane
		}
		s.popRetx()
		r.queued = false
		// Resends are not charged to the pacer: the rate (and the receiver's
		// hint) budgets new data, and a packet lost before the bottleneck
		// took none of it. The windows still bound what is in flight.
		s.transmit(d, r, p, true, false)
		if s.unsent == 0 && !s.c.isBaseline() {
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

// initialRing is the first size of a sender's DSN ring: small, as most
// ends of a connection that only receives never send (with 4,032
// connections, rings of 64 were a fifth of the heap).
const initialRing = 16

// growRing doubles the DSN ring, moving the records in flight to their
// places in the larger one. The window check before newDSN keeps the
// ring within the window.
func (s *sender) growRing() {
	bigger := make([]dsnRecord, 2*len(s.ring))
	mask := uint32(len(bigger) - 1)
	for d := s.una; d != s.nextDSN; d++ {
		bigger[d&mask] = s.ring[d&s.mask]
	}
	s.ring, s.mask = bigger, mask
}

// newDSN gives the next segment of m the next DSN and records it.
func (s *sender) newDSN(m *message) *dsnRecord {
	if s.nextDSN-s.una == uint32(len(s.ring)) {
		s.growRing()
	}
	d := s.nextDSN
	s.nextDSN++
	n := min(m.seg, m.length-m.next)
	if m.typ == proto.TypeReadReq {
		n = 0 // one packet, no payload: the data comes back
		s.readsActive++
	}
	r := &s.ring[d&s.mask]
	*r = dsnRecord{msg: m, off: m.next, n: n}
	m.next += n
	m.unacked++
	s.unsent -= uint64(n)
	if m.next == m.length || m.typ == proto.TypeReadReq {
		m.allSent = true
		s.streams[s.streamOf(m)].sendIdx++
		if m.typ == proto.TypeReadResp {
			s.c.rcv.readsIn-- // served: the responder's READ is no longer outstanding
		}
	}
	return r
}

func (s *sender) popRetx() {
	s.retxHead++
	switch {
	case s.retxHead == len(s.retx): // empty: start over, keeping the capacity
		s.retx, s.retxHead = s.retx[:0], 0
	case s.retxHead > 64 && 2*s.retxHead > len(s.retx):
		n := copy(s.retx, s.retx[s.retxHead:])
		s.retx, s.retxHead = s.retx[:n], 0
	}
}

// nextMessage picks the next stream with bytes to send, round robin. A
// stream whose next message is a READ waits while the READ limit is reached.
// It looks only at the streams marked ready (most of a connection's are
// idle, and each is a cache line of state), and unmarks those it finds
// with nothing to send.
func (s *sender) nextMessage() *message {
	n := len(s.streams)
	from := s.rrStream % n
	for _, span := range [2][2]int{{from, n}, {0, from}} {
		for k := s.ready.next(span[0], span[1]); k >= 0; k = s.ready.next(k+1, span[1]) {
			st := &s.streams[k]
			if st.sendIdx >= len(st.queue) || st.refused > 0 {
				s.ready.clear(k) // until a post, or its refused DSNs are accepted
				continue
			}
			m := st.queue[st.sendIdx]
			if m.typ == proto.TypeReadReq && s.readsActive >= s.c.readsOut {
				continue
			}
			s.rrStream = k + 1
			return m
		}
	}
	return nil
}

// streamOf is the send stream a message is queued on.
func (s *sender) streamOf(m *message) int {
	if m.internal {
		return s.respStream
	}
	return int(m.wr.Stream)
}

// usable reports whether p can take a packet now: GOOD (or, with skip,
// SKIP), room in its window and in its ring (refused packets leave holes
// behind an unresolved oldest PSN), and the peer's address on its plane
// known.
func (s *sender) usable(p *sendPath, skip bool) bool {
	if p.state == pathmgr.Skip && s.c.ep.clock.Now() >= p.skipUntil {
		p.setState(pathmgr.Good, false) // a round trip without news: clear again
	}
	return (p.state == pathmgr.Good || skip && p.state == pathmgr.Skip) &&
		p.inflight < p.window && p.ringRoom() && s.c.knows(p.plane)
}

// packetOverhead is what a packet adds to its payload on the wire, for
// pacing: the mroce header and trailer of a WRITE and the IP and UDP headers.
const packetOverhead = 60 + 4 + 28

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

// rateChanged notes the path's window, minimum RTT or state for the
// pacing rate. Whatever changes one of them calls it.
func (p *sendPath) rateChanged() {
	s := p.s
	w, rtt := 0.0, time.Duration(0)
	if p.state != pathmgr.Down && p.state != pathmgr.AssumedBad {
		w, rtt = p.cwin.Value()*s.mss, p.rtt.Min
	}
	if in := (cc.PathRate{WindowBytes: w, MinRTT: rtt}); s.rateIn[p.id] != in {
		s.rateIn[p.id], s.rateStale = in, true
	}
}

// windowChanged follows a change of the path's congestion window.
func (p *sendPath) windowChanged() {
	p.window = p.cwin.Packets()
	p.rateChanged()
}

// rttSample adds an RTT sample to the path's estimate.
func (p *sendPath) rttSample(sample time.Duration) {
	p.rtt.Update(sample)
	p.rateChanged()
}

// ringRoom reports whether the path can issue another PSN without reusing
// the ring slot of an unresolved one: the ring has a free slot, or can
// grow (transmit grows it).
func (p *sendPath) ringRoom() bool {
	return p.next-p.oldest < uint32(len(p.ring)) || len(p.ring) < maxPathRing
}

// A path keeps the PSNs it has not resolved in a ring of send records.
// 256 is the most the 256-bit bitvector can report; a path starts with 4
// slots and doubles them when it has that many unresolved, so that the
// thousands of connections of a large simulation (or a server) that send a
// few packets per path, or none, do not each hold 6 KiB per path.
const (
	minPathRing = 4
	maxPathRing = 256
)

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

// slot is PSN psn's send record (or the slot it would be in).
func (p *sendPath) slot(psn uint32) *sendRec { return &p.ring[psn&uint32(len(p.ring)-1)] }

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
					s.rrPath = int(p.id) + 1
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
			lostPlane = s.paths[lost].plane
		}
		for _, otherPlane := range [2]bool{true, false} {
			for _, p := range s.paths {
				if int(p.id) == lost || !s.usable(p, skip) || otherPlane && p.plane == lostPlane {
					continue
				}
				if best == nil || p.rtt.Samples > 0 && (best.rtt.Samples == 0 || p.rtt.SRTT < best.rtt.SRTT) {
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
	r.path, r.psn = p.id, psn
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
	h.SetPathID(p.id)
	h.SetEpoch(p.epoch)
	h.SetDstConnID(c.peerID)
	h.SetPSN(psn)
	if c.ep.cfg.Broken.ReusePSN && !retx && p.ctr.PacketsSent%64 == 63 {
		h.SetPSN(psn - 1) // a deliberate bug: the PSN the path used last, again
	}
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
	c.emit(&pkt, p.plane, p.port)

	p.ctr.PacketsSent++
	p.ctr.BytesSent += uint64(r.n)
	s.stats.Packets++
	if retx {
		p.ctr.Retransmits++
		s.stats.Retransmits++
	}
	if p.timer.Deadline() == clock.Never {
		p.armTimer(now)
	}
}

// copyPayload fills a packet's payload from the message's source: the
// posted local buffer, or, for a READ response, the region the peer reads,
// looked up again so that a region deregistered mid-response is never read.
func (s *sender) copyPayload(m *message, r *dsnRecord, payload []byte) bool {
	if len(payload) == 0 {
		return true
	}
	if m.typ == proto.TypeReadResp {
		g, err := s.c.pd.Lookup(m.srcKey, memreg.RemoteRead)
		if err != nil {
			s.c.fail(&ProtocolError{Code: proto.NackBadKey, Msg: "a region being READ was deregistered"}, StatusFlushed, true)
			return false
		}
		defer g.Release()
		src, err := g.Slice(m.srcOff+uint64(r.off), uint64(r.n))
		if err != nil {
			panic("engine: a READ response left its region: " + err.Error()) // checked at the READ_REQ
		}
		if !s.c.ep.cfg.PlaceholderPayloads {
			copy(payload, src)
		}
		return true
	}
	if !s.c.ep.cfg.PlaceholderPayloads {
		m.list.gather(r.off, payload)
	}
	return true
}

// onReadData places READ response data at the requester (spec section 9
// steps 13-15 for READ_RESP); it returns the NACK code refusing it, or 0.
func (s *sender) onReadData(tag, off, length uint32, payload []byte) proto.NackCode {
	m := s.reads[tag]
	if m == nil {
		return proto.NackBadTag
	}
	if length != m.length {
		return proto.NackBounds
	}
	if !s.c.ep.cfg.PlaceholderPayloads { // else nothing to place: the decoder held off+len within length
		if err := m.list.scatter(off, payload); err != nil {
			return proto.NackBounds // checked at post; a bug if it happens
		}
	}
	m.readGot += uint32(len(payload))
	if m.readGot >= length && !m.readDone {
		m.readDone = true
		s.readsActive--
		delete(s.reads, tag)
		s.c.madeProgress(true)
		if m.finished() {
			m.done = true
			s.complete(uint16(s.streamOf(m)))
		}
		s.pump() // a READ slot is free: the next READ may go
	}
	return 0
}

// onAck processes an ACK: the cumulative DSN, then each path record.
func (s *sender) onAck(pkt *proto.Packet, at clock.Time) {
	ack := pkt.Ack()
	before := s.una
	lower := false         // the receiver's share fell
	if !s.c.isBaseline() { // the baseline ignores rate hints: DCQCN alone, as deployed
		hint := math.Inf(1)
		if h := ack.RateHint(); h != proto.RateNoLimit {
			hint = float64(h)
		}
		if hint > s.hint {
			s.pacer.Faster(hint) // a gap taken at the old rate must not hold the new one back
		}
		lower = hint < s.hint
		s.hint = hint
	}
	s.newestAcked = 0
	cum := ack.CumDSN()
	for s.una != s.nextDSN && proto.SeqLess(s.una, cum) {
		s.ackDSN(s.una)
	}
	if ack.RecordCount() > 0 {
		s.equip() // records name paths: counted against them, or as bad, as always
	}
	for i := 0; i < int(ack.RecordCount()); i++ {
		rec := pkt.AckRecord(i)
		if int(rec.PathID()) >= len(s.paths) {
			s.stats.BadAcks++
			continue
		}
		s.paths[rec.PathID()].onRecord(rec, at)
	}
	if lower {
		// What is still in flight drains more slowly now (drainTime):
		// the paths' timers, armed at the old share, are armed again.
		for _, p := range s.paths {
			if p.inflight > 0 {
				p.armTimer(at)
			}
		}
	}
	if s.newestAcked > 0 || lower {
		s.probeOverdue(at) // after a fall of the hint too: the timers were just armed from now
	}
	if s.c.isBaseline() && s.paths != nil {
		s.ackedInOrder()
	}
	if s.una != before {
		s.c.madeProgress(true)
	}
	s.pump()
	if !s.c.isBaseline() && s.nextDSN-s.una >= s.window/2 {
		s.copyHead(at)
	}
}

// copyHead sends the oldest DSN not acknowledged once more, on a path of
// another plane, when half of the receive window waits behind it and its
// latest transmission is overdue by the margin of a tail probe: lost with
// its resend (a burst takes both), it would hold the whole connection
// once the window filled, for as long as its path took to find out.
// Each transmission of it is copied at most once. Like a probe it waits
// out the drain time: in an incast a packet at the back of the queue is
// not late.
func (s *sender) copyHead(now clock.Time) {
	r := s.record(s.una)
	if s.c.state != Established || r == nil || r.acked || r.queued || r.waiting || int(r.path) >= len(s.paths) {
		return // (an ACK's completion may have closed the connection)
	}
	p := s.paths[r.path]
	if latest := p.slot(r.psn); latest.psn != r.psn || latest.resolved ||
		now.Sub(latest.sentAt) < s.overdueMargin(p)+s.drainTime()+s.c.ep.cfg.AckDelay {
		return
	}
	s.copyOnOtherPlane(s.una, r, p, -1, false)
}

// ackDSN marks DSN d acknowledged and completes what that finishes.
func (s *sender) ackDSN(d uint32) {
	r := s.record(d)
	if r == nil || r.acked {
		return
	}
	r.acked = true
	m := r.msg
	if r.refusals > 0 {
		k := s.streamOf(m)
		st := &s.streams[k]
		st.refused-- // accepted at last: the stream may send again when none is left
		if st.refused == 0 {
			s.ready.set(k)
		}
		if st.probing && st.probe == d {
			st.probing = false
			s.releaseRefused(k)
		}
	}
	m.unacked--
	if m.finished() {
		m.done = true
		s.complete(uint16(s.streamOf(m)))
	}
	for s.una != s.nextDSN && s.ring[s.una&s.mask].acked {
		s.ring[s.una&s.mask] = dsnRecord{}
		s.una++
	}
}

// complete reports the finished messages at the head of a stream, in order.
func (s *sender) complete(stream uint16) {
	st := &s.streams[stream]
	for st.head < len(st.queue) && st.queue[st.head].done {
		m := st.queue[st.head]
		st.queue[st.head] = nil
		st.head++
		s.msgs--
		if !m.failed && !m.internal && !m.wr.Unsignaled {
			s.c.report(Completion{ID: m.wr.ID, Op: m.wr.Op, Stream: stream, Bytes: m.length})
		}
	}
	if st.head > 32 && st.head*2 > len(st.queue) {
		n := copy(st.queue, st.queue[st.head:])
		clear(st.queue[n:])
		st.queue = st.queue[:n]
		st.sendIdx -= st.head
		st.head = 0
	}
}

// onRecord applies one ACK record to its path: RTT, CE, and every PSN it
// resolves (spec section 5.5).
func (p *sendPath) onRecord(rec proto.AckRecord, at clock.Time) {
	s := p.s
	h, e := rec.HighestPSN(), rec.Epoch()
	if !proto.SeqLess(h, p.next) || proto.SeqLess(h, p.epochStart[e]) {
		s.stats.BadAcks++ // never sent, or an older use of this epoch value
		return
	}
	now32 := uint32(at)
	if sample := now32 - rec.EchoTimestamp() - rec.ServiceTime(); sample < 1<<31 {
		p.rttSample(time.Duration(sample))
	}
	marked := 0
	if d := rec.CECount() - p.ce; d != 0 && d < 1<<31 {
		marked = int(d)
		p.ctr.CEMarks += uint64(d)
		p.ce = rec.CECount()
		if s.c.ep.cfg.Broken.IgnoreCE {
			marked = 0
		}
	}
	es := p.epochStart[e]
	resolved := false
	ackedBefore := p.ctr.Acked
	var gotten, missed int // this report's verdicts, for the loss measurement
	for psn := p.oldest; proto.SeqLessEq(psn, h); psn++ {
		r := p.slot(psn)
		if r.resolved || r.psn != psn || proto.SeqLess(psn, es) {
			continue // done, or sent in an earlier epoch: only a timeout resolves it
		}
		k := h - 1 - psn
		switch {
		case psn == h || k < 256 && rec.Received(int(k)):
			p.resolveAcked(r, at)
			gotten++
		case s.c.isBaseline():
			continue // in order: what is not acknowledged is resent by go-back-N
		default:
			p.resolveLost(r, psn)
			missed++
		}
		resolved = true
	}
	p.advance()
	p.cwin.OnAck(int(p.ctr.Acked-ackedBefore), marked, h, p.next)
	p.windowChanged()
	if resolved {
		p.probed, p.timeouts = false, 0
		if p.state == pathmgr.AssumedBad {
			p.setState(pathmgr.Good, false)
		}
		p.armTimer(at)
		p.checkLoss(at, gotten, missed)
	}
	// A CE mark steers new packets to clear paths for a while (SKIP); the
	// next clean report brings the path back.
	switch {
	case marked > 0 && (p.state == pathmgr.Good || p.state == pathmgr.Skip):
		p.skipUntil = at.Add(max(p.rtt.SRTT, p.s.c.ep.cfg.AckDelay))
		if p.state == pathmgr.Good {
			p.setState(pathmgr.Skip, false)
		}
	case marked == 0 && resolved && p.state == pathmgr.Skip:
		p.setState(pathmgr.Good, false)
	}
}

func (p *sendPath) advance() {
	for p.oldest != p.next && p.slot(p.oldest).resolved {
		p.oldest++
	}
}

func (p *sendPath) resolveAcked(r *sendRec, at clock.Time) {
	r.resolved = true
	if r.sentAt > p.s.newestAcked {
		p.s.newestAcked, p.s.newestRTT = r.sentAt, at.Sub(r.sentAt)
	}
	p.released()
	p.ctr.Acked++
	p.s.ackDSN(r.dsn)
}

// resolveLost declares the transmission with PSN psn lost and queues its
// content for retransmission, unless it was acknowledged another way or a
// later transmission of it is still out.
func (p *sendPath) resolveLost(r *sendRec, psn uint32) {
	r.resolved = true
	p.released()
	p.ctr.Lost++
	s := p.s
	d := s.record(r.dsn)
	if d == nil || d.acked || d.queued || d.waiting || d.path != p.id || d.psn != psn {
		return
	}
	d.queued = true
	s.retx = append(s.retx, r.dsn)
}

// armTimer sets the path's timer from now: a tail probe (timeout: once the
// path has an RTT sample), then the retransmission timeout, doubled per
// consecutive timeout. A path in ASSUMED_BAD is probed at its timeout.
// probeOverdue may bring the timer forward.
func (p *sendPath) armTimer(now clock.Time) {
	if p.inflight == 0 && p.state != pathmgr.AssumedBad {
		p.timer.Stop()
		return
	}
	p.timer.Reset(now.Add(p.timeout()))
}

// fireBy brings the path's timer forward to at, if it is due later.
func (p *sendPath) fireBy(at clock.Time) {
	if at < p.timer.Deadline() {
		p.timer.Reset(at)
	}
}

// timedOut counts a timeout in a row, up to what the count holds: the
// timeout doubles up to RTOMax long before, and a connection without
// progress fails after Config.NoProgress.
func (p *sendPath) timedOut() {
	if p.timeouts < math.MaxUint8 {
		p.timeouts++
	}
}

// rto is the path's retransmission timeout, doubled per timeout in a row.
func (p *sendPath) rto() time.Duration { return p.rtoAfter(int(p.timeouts)) }

// rtoAfter is the retransmission timeout after timeouts in a row.
func (p *sendPath) rtoAfter(timeouts int) time.Duration {
	cfg := &p.s.c.ep.cfg
	if p.s.c.isBaseline() && cfg.LocalAckTimeout > 0 {
		return cfg.LocalAckTimeout
	}
	rtt := p.rtt
	if rtt.Samples == 0 && p.s.hinted() {
		rtt = p.s.slowestRTT()
	}
	rto := rtt.RTO(cfg.RTOInitial, cfg.RTOMin, cfg.RTOMax)
	if !p.s.c.isBaseline() {
		rto = max(rto, rtt.SRTT+p.s.drainTime())
		if p.rtt.Samples == 0 && rtt.Samples > 0 {
			rto *= 2
		}
	}
	for i := 0; i < timeouts && rto < cfg.RTOMax; i++ {
		rto *= 2
	}
	return min(rto, cfg.RTOMax)
}

// hinted reports whether the receiver has granted a rate: the drain time,
// and the timers that lean on it, need one. The first hinted ACK re-arms
// every path's timer (the hint fell from none), so a path not yet sampled
// is then armed by its connection's estimate.
func (s *sender) hinted() bool { return s.hint > 0 && !math.IsInf(s.hint, 1) }

// slowestRTT is the RTT estimate of the connection's sampled path with the
// largest smoothed RTT (no samples: none has one). A path not yet sampled
// times out by twice the timeout it gives rather than by RTOInitial: its
// connection's paths join the same two hosts, and with its first packets
// lost a path would hold their DSNs, and soon the whole DSN window, for
// RTOInitial (1 ms, two hundred round trips of a data-center fabric).
// Twice, because a first window waits behind every other connection's in
// the sending host's own queue, which no sample has measured yet.
func (s *sender) slowestRTT() pathmgr.RTT {
	var r pathmgr.RTT
	for _, p := range s.paths {
		if p.rtt.Samples > 0 && (r.Samples == 0 || p.rtt.SRTT > r.SRTT) {
			r = p.rtt
		}
	}
	return r
}

func (p *sendPath) timeout() time.Duration {
	if !p.probed && p.rtt.Samples > 0 && (p.state == pathmgr.Good || p.state == pathmgr.Skip) && !p.s.c.isBaseline() {
		cfg := &p.s.c.ep.cfg
		floor := cfg.RTOMin
		if p.s.hinted() {
			// The drain time keeps the probe behind the queue the packets
			// wait in; without a hint nothing does, and the timeout's
			// floor stands (a floor of ProbeMin resent packets that were
			// only late in an incast without hints).
			floor = cfg.ProbeMin
		}
		return min(max(2*p.rtt.SRTT+cfg.AckDelay, p.rtt.SRTT+p.s.drainTime()+cfg.AckDelay, floor), cfg.RTOMax)
	}
	if p.state == pathmgr.AssumedBad && !p.s.c.isBaseline() {
		// Probing: the wait doubles, but only so far: what failed may be
		// repaired, and it is a small packet per path.
		return min(p.rto(), max(p.s.c.ep.cfg.BadProbeMax, p.rtoAfter(0)))
	}
	return p.rto()
}

// probeOverdue brings forward the tail probes of a connection with nothing
// new to send. A lost last packet of a path is followed by nothing on that
// path, and its timer, twice a smoothed RTT that a busy fabric's queues
// inflate, runs from the path's last ACK, which came a window of packets
// before the lost one was sent. Here a path's oldest packet in flight is
// overdue, counted from when it was sent, after the round trip of the
// newest packet an ACK reported received on any path (how long one takes
// now) or the path's own smoothed RTT, whichever is longer, plus half of
// it (at least ProbeMin: the planes' queues differ most at the tail),
// plus the drain time (an incast's packets wait their turn in one queue).
// Once no more than tailPackets are in flight, the margin is the newest
// round trip and ProbeMin: the path's smoothed RTT remembers the queues of
// the busy part of a transfer, and half a round trip more is what the
// planes' queues could differ by then; waiting either out costs the
// completion more than a probe sent early costs the network (a packet,
// and its copy). Without a receiver's hint there is no drain time to
// wait for, and the tail's own queue can hold a packet past the margin:
// the path's timer alone decides (the baseline's ACKs carry no hint). It
// is reckoned on ACKs, after resends, and when the hint falls.
func (s *sender) probeOverdue(now clock.Time) {
	if s.unsent != 0 || s.newestRTT == 0 || !s.hinted() {
		return
	}
	cfg := &s.c.ep.cfg
	inflight := s.inflight()
	d := s.drainFor(inflight)
	last := inflight <= tailPackets
	for _, p := range s.paths {
		if p.inflight == 0 || p.probed || p.state != pathmgr.Good && p.state != pathmgr.Skip {
			continue
		}
		margin := s.overdueMargin(p)
		if last {
			// Not before the path's own shortest round trip: a slower
			// plane's packet is not late by a faster plane's RTT.
			margin = max(s.newestRTT, p.rtt.Min) + cfg.ProbeMin
		}
		sent := p.slot(p.oldest).sentAt
		p.fireBy(max(sent.Add(margin+d+cfg.AckDelay), now))
	}
}

// overdueMargin is how long after it was sent a packet on path p is
// overdue: the newest round trip or the path's smoothed RTT, whichever is
// longer, and half of it more (at least ProbeMin: the planes' queues can
// differ by that much).
func (s *sender) overdueMargin(p *sendPath) time.Duration {
	late := func(rtt time.Duration) time.Duration { return rtt + max(rtt/2, s.c.ep.cfg.ProbeMin) }
	return max(late(s.newestRTT), late(p.rtt.SRTT))
}

// tailPackets is how few packets in flight make the last of a transfer
// (probeOverdue). In the 64-host all-to-all at 1% loss, with tail resends
// copied, the margin of the last 4 at the newest round trip and ProbeMin
// keeps 0.913-0.929 of capacity over seeds 1-4; at 1.5 round trips
// 0.895-0.900, and with the smoothed RTT counting too and no copies
// 0.868-0.878. (At 1.5 round trips, 6 kept no more than 4.)
const tailPackets = 4

// inflight is the packets sent on any path and not yet resolved.
func (s *sender) inflight() int { return s.inflightAll }

// took and released count a packet in flight on the path and in the
// connection's total: the timers read the total at every packet, and a
// sum over the paths would read every path's state to learn it.
func (p *sendPath) took()     { p.inflight++; p.s.inflightAll++ }
func (p *sendPath) released() { p.inflight--; p.s.inflightAll-- }

// drainTime is how long the receiver takes, at the rate it granted this
// connection, to take everything the connection has in flight: no packet
// is late before the ones sent with it could have been delivered. In an
// N:1 incast the first round trip puts N initial windows in one queue; an
// RTT sampled from the front of it says nothing of a packet at its back,
// and a timer of twice that RTT would resend packets that are only
// waiting their turn (and, resent, sit in the same queue again). At
// line rate, alone, it is a fraction of a round trip and changes nothing.
// It is at most RTOMax, whatever hint a peer sends.
func (s *sender) drainTime() time.Duration { return s.drainFor(s.inflight()) }

// drainFor is drainTime for packets in flight.
func (s *sender) drainFor(packets int) time.Duration {
	if !s.hinted() {
		return 0
	}
	d := float64(packets) * s.mss / s.hint
	return time.Duration(min(d*float64(time.Second), float64(s.c.ep.cfg.RTOMax)))
}

func (p *sendPath) onTimer() {
	s := p.s
	c := s.c
	if c.state != Established {
		return
	}
	now := c.ep.clock.Now()
	if p.state != pathmgr.Down && !c.isBaseline() {
		p.settleMoot()
	}
	switch {
	case p.state == pathmgr.Down:
		return
	case c.isBaseline():
		// The local ACK timeout: go back to the oldest unacknowledged PSN.
		if p.inflight == 0 {
			return
		}
		p.timedOut()
		p.ctr.Timeouts++
		s.stats.Timeouts++
		s.goBack(p.oldest)
	case p.state == pathmgr.AssumedBad:
		// A probe went unanswered: the route may be what failed. Move to a
		// new source port, then probe again.
		p.repath(now)
		p.sendProbe()
		p.timeouts = min(p.timeouts, 15) + 1 // at most 16 (and a count of 255 does not wrap)
	case p.inflight == 0:
		return
	case !p.probed && p.rtt.Samples > 0:
		p.tailProbe()
	default:
		p.onRTO()
	}
	p.armTimer(now)
	s.pump()
	c.ep.flush()
}

// settleMoot resolves, without counting them lost, the path's packets in
// flight whose DSN another transmission delivered (a probe's copy on
// another plane, a resend): no report of them matters any more, and a
// timeout for them would cut a working path's window to one packet.
func (p *sendPath) settleMoot() {
	s := p.s
	for psn := p.oldest; psn != p.next; psn++ {
		r := p.slot(psn)
		if r.resolved || r.psn != psn {
			continue
		}
		if d := s.record(r.dsn); d == nil || d.acked {
			r.resolved = true
			p.released()
		}
	}
	p.advance()
}

// copyOnOtherPlane sends DSN dsn, sent on path p, once more on a path of
// another plane whose window has room, when one has: the receiver takes
// whichever comes first, and a transmission the other delivered is
// settled without a loss (settleMoot). A path of plane avoid (where the
// DSN was lost; -1: none) is taken only when no other has room.
func (s *sender) copyOnOtherPlane(dsn uint32, d *dsnRecord, p *sendPath, avoid int, probe bool) {
	for _, shun := range [2]bool{true, false} {
		for i := 1; i < len(s.paths); i++ {
			q := s.paths[(int(p.id)+i)%len(s.paths)]
			if q.plane == p.plane || shun && q.plane == avoid || !s.usable(q, true) {
				continue
			}
			s.transmit(dsn, d, q, true, probe)
			s.stats.Copies++
			q.fireBy(s.c.ep.clock.Now().Add(q.timeout())) // the copy is q's newest packet
			return
		}
		if avoid < 0 {
			return
		}
	}
}

// tailProbe resends the newest unresolved packet of the path, asking for an
// acknowledgment, so the receiver reports what the path delivered.
func (p *sendPath) tailProbe() {
	s := p.s
	p.probed = true
	for psn := p.next - 1; psn != p.oldest-1; psn-- {
		r := p.slot(psn)
		if r.resolved {
			continue
		}
		d := s.record(r.dsn)
		if d == nil || d.acked || d.waiting || !p.ringRoom() {
			continue
		}
		s.stats.TailProbes++
		p.ctr.TailProbes++
		s.transmit(r.dsn, d, p, true, true)
		if s.unsent == 0 {
			// Nothing follows the probe: lost, it would leave the path to
			// its retransmission timeout. A copy goes on another plane.
			s.copyOnOtherPlane(r.dsn, d, p, -1, true)
		}
		return
	}
}

// onRTO declares everything unresolved on the path lost: it is resent on
// other paths. The path stops taking new data (ASSUMED_BAD) and is probed
// until a probe or an acknowledgment shows it works; an unanswered probe
// repaths it.
func (p *sendPath) onRTO() {
	s := p.s
	p.cwin.OnTimeout() // this path only
	p.windowChanged()
	p.timedOut()
	p.ctr.Timeouts++
	s.stats.Timeouts++
	for psn := p.oldest; psn != p.next; psn++ {
		if r := p.slot(psn); !r.resolved {
			p.resolveLost(r, psn)
		}
	}
	p.advance()
	p.setState(pathmgr.AssumedBad, false)
	p.sendProbe()
}

// setState changes the path's state and tells the application.
func (p *sendPath) setState(st pathmgr.State, repath bool) {
	from := p.state
	p.state = st
	p.rateChanged()
	c := p.s.c
	if o, ok := c.events.(PathObserver); ok && (from != st || repath) {
		o.PathChanged(c, PathEvent{Path: int(p.id), Plane: p.plane, From: from, To: st, Repath: repath,
			SrcPort: p.port, Epoch: p.epoch, At: c.ep.clock.Now()})
	}
}

// planeDown takes the path out of use with its plane: what it had in
// flight is resent on other paths.
func (p *sendPath) planeDown() {
	if p.s.c.isBaseline() {
		// One path, in order: nothing can go elsewhere. Wait for the plane;
		// go-back-N resends from the oldest unacknowledged when it returns.
		p.timer.Stop()
		p.setState(pathmgr.Down, false)
		return
	}
	for psn := p.oldest; psn != p.next; psn++ {
		if r := p.slot(psn); !r.resolved && r.psn == psn {
			p.resolveLost(r, psn)
		}
	}
	p.advance()
	p.timer.Stop()
	p.setState(pathmgr.Down, false)
}

// planeUp puts the path back on trial: it is probed and takes data again
// once a probe is answered.
func (p *sendPath) planeUp(now clock.Time) {
	p.timeouts = 0
	if p.s.c.isBaseline() {
		p.setState(pathmgr.Good, false)
		p.s.goBack(p.oldest)
		p.armTimer(now)
		return
	}
	p.setState(pathmgr.AssumedBad, false)
	p.sendProbe()
	p.armTimer(now)
}

// repath gives the path another source port from the pool; its epoch
// advances and its PSN space continues (spec section 6.3). A path moves at
// most once per MPL: it reports false, and stays, when it moved more
// recently.
func (p *sendPath) repath(now clock.Time) bool {
	cfg := &p.s.c.ep.cfg
	if p.ctr.Repaths > 0 && now.Sub(p.repathedAt) < cfg.MPL {
		return false
	}
	n := len(cfg.SourcePorts)
	next := (p.portIndex + len(p.s.paths)) % n
	if next == p.portIndex {
		next = (next + 1) % n // the pool is a multiple of the paths: step off
	}
	p.portIndex = next
	p.repathedAt = now
	p.port = cfg.SourcePorts[p.portIndex]
	p.epoch = (p.epoch + 1) & 3
	p.epochStart[p.epoch] = p.next
	p.ctr.Repaths++
	p.setState(p.state, true)
	return true
}

func (p *sendPath) sendProbe() {
	c := p.s.c
	if !c.knows(p.plane) {
		return
	}
	p.probeID++
	var pkt proto.Packet
	c.build(&pkt, proto.TypeProbe, 0, 0)
	pkt.Common.SetDstConnID(c.peerID)
	pkt.Common.SetPathID(p.id)
	pkt.Common.SetEpoch(p.epoch)
	pkt.Probe().SetProbeID(p.probeID)
	c.emit(&pkt, p.plane, p.port)
}

func (s *sender) onProbeReply(pkt *proto.Packet, at clock.Time) {
	s.equip() // a reply names a path: counted against it, or as bad, as always
	id := int(pkt.Common.PathID())
	if id >= len(s.paths) {
		s.stats.BadAcks++
		return
	}
	p := s.paths[id]
	r := pkt.ProbeReply()
	if r.ProbeID() != p.probeID || pkt.Common.Epoch() != p.epoch {
		return // an old probe's reply
	}
	if sample := uint32(at) - r.EchoTimestamp() - r.ServiceTime(); sample < 1<<31 {
		p.rttSample(time.Duration(sample))
	}
	if p.state == pathmgr.AssumedBad {
		p.setState(pathmgr.Good, false)
		p.timeouts = 0
		p.armTimer(at)
		s.pump()
	}
}

// onNack handles a refused packet (spec section 7).
func (s *sender) onNack(pkt *proto.Packet) {
	s.equip() // a refusal names a DSN and a path: handled as always
	n := pkt.Nack()
	code := n.Code()
	r := s.record(n.DSN())
	if code.Fatal() {
		st := StatusRemoteInvalid
		switch code {
		case proto.NackBadKey, proto.NackAccess, proto.NackBounds:
			st = StatusRemoteAccess
		}
		err := &RemoteError{Nack: code}
		if r != nil && !r.acked {
			m := r.msg
			s.failMessage(m, st, err)
		}
		s.c.fail(err, StatusFlushed, true)
		return
	}
	if s.c.isBaseline() {
		bl := &s.c.bl
		switch code {
		case proto.NackSeqErr:
			if !bl.paused && !(bl.resend && proto.SeqLessEq(bl.resendPSN, n.PSN())) {
				s.goBack(n.PSN()) // not while waiting out an RNR, nor behind a resend already going
			}
		case proto.NackRNR, proto.NackResource:
			// Stop, wait, then go back to the refused PSN.
			bl.paused, bl.resend = true, false
			bl.retryPSN = n.PSN()
			bl.retry.Reset(s.c.ep.clock.Now().Add(time.Duration(n.RetryAfter()) * time.Microsecond))
			s.stats.Nacks++
		}
		s.pump()
		return
	}
	if code == proto.NackSeqErr {
		return // baseline mode only
	}
	s.stats.Nacks++
	if int(n.PathID()) < len(s.paths) {
		p := s.paths[n.PathID()]
		if psn := n.PSN(); psn-p.oldest < p.next-p.oldest {
			if sr := p.slot(psn); !sr.resolved && sr.psn == psn && sr.dsn == n.DSN() {
				sr.resolved = true
				p.released()
				p.advance()
			}
		}
	}
	if r == nil || r.acked || r.waiting {
		return
	}
	now := s.c.ep.clock.Now()
	r.queued = false
	r.waiting = true
	// Back off: the receiver's RetryAfter, doubled for each refusal of
	// the same content (at most 64 times it).
	wait := time.Duration(n.RetryAfter()) * time.Microsecond << min(r.refusals, 6)
	if s.c.ep.cfg.Broken.IgnoreRetryAfter {
		wait = 0 // a deliberate bug: the refused packet goes again at once
	}
	st := &s.streams[s.streamOf(r.msg)]
	if r.refusals == 0 {
		st.refused++
	}
	r.refusals++
	r.retryAt = now.Add(wait)
	switch {
	case !st.probing:
		st.probing, st.probe = true, n.DSN()
	case proto.SeqLess(n.DSN(), st.probe):
		// An older packet refused (its NACK came by a slower path): it is
		// the one to retry, as its receive is the one the application
		// posts first; the later one waits.
		if old := s.record(st.probe); old != nil && !old.acked && old.waiting {
			old.retryAt = clock.Never
		}
		st.probe = n.DSN()
	case st.probe != n.DSN():
		r.retryAt = clock.Never // waits for the probe: see sendStream.refused
	}
	s.waiting = append(s.waiting, n.DSN())
	if r.retryAt != clock.Never && (s.retry.Deadline() == clock.Never || r.retryAt < s.retry.Deadline()) {
		s.retry.Reset(r.retryAt)
	}
	s.pump()
}

// releaseRefused resends now the refused DSNs of stream that waited for
// its probe: the receiver accepted that, so it is ready again.
func (s *sender) releaseRefused(stream int) {
	now := s.c.ep.clock.Now()
	released := false
	for _, d := range s.waiting {
		if r := s.record(d); r != nil && !r.acked && r.waiting && r.retryAt == clock.Never && s.streamOf(r.msg) == stream {
			r.retryAt, released = now, true
		}
	}
	if released {
		s.retry.Reset(now)
	}
}

// onRetry moves refused DSNs whose wait is over to the retransmit queue.
func (s *sender) onRetry() {
	now := s.c.ep.clock.Now()
	next := clock.Never
	kept := s.waiting[:0]
	for _, d := range s.waiting {
		r := s.record(d)
		switch {
		case r == nil || r.acked || !r.waiting:
		case r.retryAt <= now:
			r.waiting, r.queued = false, true
			s.retx = append(s.retx, d)
		default:
			kept = append(kept, d)
			next = min(next, r.retryAt)
		}
	}
	s.waiting = kept
	if next != clock.Never {
		s.retry.Reset(next)
	}
	s.pump()
	s.c.ep.flush()
}

// failMessage completes one message with an error status now.
func (s *sender) failMessage(m *message, st Status, err error) {
	if m.done {
		return
	}
	m.done, m.failed = true, true
	if m.typ == proto.TypeReadReq {
		delete(s.reads, m.tag)
	}
	s.c.report(Completion{ID: m.wr.ID, Op: m.wr.Op, Status: st, Stream: m.wr.Stream, Bytes: m.length, Err: err})
}

// flush completes every outstanding message with status st.
func (s *sender) flush(st Status, err error) {
	for i := range s.streams {
		q := &s.streams[i]
		for _, m := range q.queue[q.head:] {
			if m.failed || m.internal {
				continue // reported with its own error, or not the application's
			}
			wc := Completion{ID: m.wr.ID, Op: m.wr.Op, Status: st, Stream: uint16(i), Bytes: m.length, Err: err}
			if m.done {
				// Acknowledged in full, waiting behind an earlier message:
				// it did complete.
				wc.Status, wc.Err = StatusOK, nil
			}
			m.done = true
			if wc.Status != StatusOK || !m.wr.Unsignaled {
				s.c.report(wc)
			}
		}
		q.queue, q.head, q.sendIdx = nil, 0, 0
	}
	s.msgs = 0
	clear(s.reads)
	for _, p := range s.paths {
		p.timer.Stop()
	}
	if s.retry != nil {
		s.retry.Stop()
		s.paceT.Stop()
	}
	if s.c != nil && s.c.bl.retry != nil { // s.c is set once the connection is established
		s.c.bl.retry.Stop()
	}
}

// Telemetry returns a snapshot of every path. Like every method of a
// Conn it runs on the engine's goroutine: it may give the sender its
// paths (equip).
func (c *Conn) Telemetry() []pathmgr.Telemetry {
	if c.snd.c != nil { // negotiated
		c.snd.equip()
	}
	out := make([]pathmgr.Telemetry, len(c.snd.paths))
	for i, p := range c.snd.paths {
		out[i] = pathmgr.Telemetry{Path: int(p.id), Plane: p.plane, SrcPort: p.port, Epoch: p.epoch, State: p.state,
			RTT: p.rtt, InFlight: p.inflight, Window: p.window, Counters: p.ctr}
	}
	return out
}

// SenderStats returns the connection's sending counters.
func (c *Conn) SenderStats() SenderStats { return c.snd.stats }

// report hands a completion to the connection's events.
func (c *Conn) report(wc Completion) {
	if c.events != nil {
		c.events.Completion(c, wc)
	}
}

// lossRound is how many resolved packets of a path make one measurement of
// its loss.
const lossRound = 64

// checkLoss adds one ACK's verdicts on the path's packets to its loss
// measurement; at the end of a round of lossRound packets it moves the
// path to a new source port when its loss stands out: above 2% and
// LossOutlierFactor times the other paths' average. Random loss that hits
// every path alike changes nothing (loss is not congestion here); a route
// through a bad link is left, as its path's own sequence shows it (spec
// section 6.3).
func (p *sendPath) checkLoss(now clock.Time, acked, lost int) {
	p.roundAcked += acked
	p.roundLost += lost
	if p.roundAcked+p.roundLost < lossRound {
		return
	}
	f := float64(p.roundLost) / float64(p.roundAcked+p.roundLost)
	p.roundAcked, p.roundLost = 0, 0
	if p.lossAvg < 0 {
		p.lossAvg = f
	} else {
		p.lossAvg += (f - p.lossAvg) / 4
	}
	cfg := &p.s.c.ep.cfg
	if cfg.LossOutlierFactor < 0 || p.lossAvg <= 0.02 {
		return
	}
	others, n := 0.0, 0
	for _, q := range p.s.paths {
		if q != p && q.lossAvg >= 0 {
			others += q.lossAvg
			n++
		}
	}
	if n == 0 || p.lossAvg <= cfg.LossOutlierFactor*others/float64(n) {
		return
	}
	if !p.repath(now) {
		return // it moved less than an MPL ago
	}
	p.s.stats.LossRepaths++
	p.lossAvg = others / float64(n) // a new route starts from the connection's average
}
