package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

// receiver is a connection's receive side. It validates and places data
// packets (spec section 9), completes messages in order per stream (spec
// section 6.5), and acknowledges what arrived (spec section 6.6).
type receiver struct {
	c *Conn

	// Acknowledgment.
	pending int  // data packets since the last ACK
	repeat  bool // the ACK timer is set to repeat the last ACK
	// gap is the moving average of the time between data arrivals, and
	// lastArrival the latest, for the wait before a repeat (sendAck).
	gap         time.Duration
	lastArrival clock.Time
	ready       bool       // init has run, so receives may be posted
	ackPlane    int        // the plane of the latest data packet, where ACKs go
	ackPort     int        // the index in SourcePorts of the last ACK's source port
	share       *cc.Member // this connection in the endpoint's InboundCapacity allocation, which sets its rate hints; nil without one

	// What the ACKs report. dirty lists the paths that recorded data since
	// the last ACK, echoing those whose last record is still to be
	// repeated, and repeats those the ACK being built repeats. repeatACKs
	// counts the ACKs left that repeat records (sawLoss).
	paths            []recvPath
	dsn              dsnWindow
	dirty            []uint8
	echoing, repeats []uint8
	repeatACKs       int
	// skipRate is the share of PSNs the paths skipped (lost, or refused),
	// a moving average over rounds of lossRound PSNs; skipped and
	// recorded count those of the round under way (recordPath). echoes
	// is how many later ACKs repeat a record at that rate.
	skipRate          float64
	skipped, recorded int
	echoes            uint8

	// Messages being received and the receives posted for them, by stream.
	streams []recvStream
	free    []*rxMessage // completed messages, kept for reuse
	srq     *SRQ         // where receives come from, when shared
	readsIn int          // READs and atomics accepted and not yet fully answered

	// Receive credits (credit.go). grown holds the streams whose limit
	// grew since an ACK last named it, and awaited those the sender may
	// wait on: named before, or refused a SEND. lastNamed is the stream
	// named last and lastSend the stream of the latest SEND or WRITE_IMM,
	// -1 for none.
	grown     bitset
	awaited   bitset
	lastNamed int
	lastSend  int

	stats ReceiverStats
}

func (r *receiver) init(c *Conn) {
	r.c = c
	if a := c.ep.alloc; a != nil {
		r.share = a.Member(c.localID)
	}
	r.dsn = newDSNWindow(c.peerIDSN, c.ep.cfg.DSNWindow)
	r.paths = make([]recvPath, c.paths)
	old := r.streams
	r.streams = make([]recvStream, c.streams)
	r.grown, r.awaited, r.lastNamed, r.lastSend = newBitset(c.streams), newBitset(c.streams), -1, -1
	for i := range r.streams {
		if i < len(old) {
			r.streams[i].recvs = old[i].recvs
			if len(old[i].recvs) > 0 {
				r.grown.set(i) // posted before the handshake ended
			}
		}
	}
	r.ready = true
}

// postRecv appends a receive buffer to a stream.
func (r *receiver) postRecv(wr RecvWR) error {
	c := r.c
	if !r.ready {
		return ErrNotReady
	}
	if int(wr.Stream) >= len(r.streams) {
		return fmt.Errorf("engine: stream %d: the connection has %d", wr.Stream, len(r.streams))
	}
	if r.srq != nil {
		return errors.New("engine: the connection takes its receives from a shared receive queue")
	}
	var one [1]SGE
	length, err := gatherList(wr.Local, wr.SGL, &one).check(c.pd, memreg.LocalWrite)
	if err != nil {
		return err
	}
	st := &r.streams[wr.Stream]
	st.recvs = append(st.recvs, recvEntry{id: wr.ID, local: wr.Local, list: wr.SGL, length: length})
	r.posted(int(wr.Stream))
	return nil
}

// onData validates and places a data packet, following spec section 9 from
// step 8 to step 17 in order. A packet refused at a step gets a NACK or a
// counted drop, and changes nothing.
func (r *receiver) onData(pkt *proto.Packet, d *link.Datagram, plane int, at clock.Time) {
	c := r.c
	h := pkt.Common
	// Step 8, the size and the path id. A CE mark counts from here on.
	if d.Size() > c.maxPacket || int(h.PathID()) >= len(r.paths) {
		r.stats.BadPath++
		return
	}
	if d.ECN == link.CE {
		r.paths[h.PathID()].ce++
		r.stats.CE++
	}
	c.ep.inboundArrival(plane, d.ECN == link.CE)
	r.ackPlane = plane
	if !c.tp.admit(r, h, d, plane, at) {
		return
	}
	// Step 9, the DSN.
	switch r.dsn.check(h.DSN()) {
	case dsnOutOfWindow:
		r.stats.OutOfWindow++
		return
	case dsnDuplicate:
		r.stats.Duplicates++
		r.recordPath(h, at)
		r.ackNow()
		return
	}
	if pkt.Type() == proto.TypeReadResp || pkt.Type() == proto.TypeAtomicResp {
		r.onResponse(pkt, plane, at)
		return
	}
	in, known := arrivalOf(pkt)
	if !known {
		r.nack(pkt, plane, proto.NackUnsupported, 0, 0)
		return
	}
	// Steps 10 and 11, the stream and the message's first packet.
	st, m, ok := r.checkMessage(pkt, d, plane, &in, at)
	if !ok {
		return
	}
	// Step 12, the operation allowed.
	if in.msg.typ.IsAtomic() && !c.atomics {
		r.nack(pkt, plane, proto.NackUnsupported, in.stream, in.msn)
		return
	}
	if in.msg.typ.IsRequest() && r.readsIn >= c.ep.cfg.MaxReadsIn {
		r.nack(pkt, plane, proto.NackReadLimit, in.stream, in.msn)
		return
	}
	// Steps 13 to 15, the key, access and bounds of the target region.
	region, ok := r.checkRegion(pkt, plane, &in, at)
	if !ok {
		return
	}
	// Step 16, the posted receive.
	recv, ok := r.checkReceive(pkt, plane, st, &in)
	if !ok {
		release(region)
		return
	}
	// Step 17, place and record.
	r.place(pkt, d, at, st, m, &in, region, recv)
}

// arrival is what a data packet says of its message.
type arrival struct {
	msg    rxMessage // the fields every packet of the message must repeat
	stream uint16
	msn    uint32
	msgOff uint32
}

// arrivalOf reads the message fields of a WRITE, WRITE_IMM, SEND,
// READ_REQ, FETCH_ADD or CMP_SWAP. It reports false for any other type.
func arrivalOf(pkt *proto.Packet) (arrival, bool) {
	var in arrival
	switch pkt.Type() {
	case proto.TypeWrite, proto.TypeWriteImm:
		w := pkt.Write()
		in.stream, in.msn, in.msgOff = w.Stream(), w.MSN(), w.MsgOffset()
		in.msg = rxMessage{typ: pkt.Type(), msgLen: w.MsgLen(), rkey: w.RKey(), roff: w.RemoteOffset()}
		if pkt.Type() == proto.TypeWriteImm {
			in.msg.rsn, in.msg.imm = pkt.Imm().RSN(), pkt.Imm().Immediate()
		}
	case proto.TypeSend:
		sh := pkt.Send()
		in.stream, in.msn, in.msgOff = sh.Stream(), sh.MSN(), sh.MsgOffset()
		in.msg = rxMessage{typ: proto.TypeSend, msgLen: sh.MsgLen(), rsn: sh.RSN()}
	case proto.TypeReadReq:
		rq := pkt.ReadReq()
		in.stream, in.msn = rq.Stream(), rq.MSN()
		in.msg = rxMessage{typ: proto.TypeReadReq, msgLen: rq.MsgLen(), rkey: rq.RKey(), roff: rq.RemoteOffset(), rsn: rq.ReadTag()}
	case proto.TypeFetchAdd, proto.TypeCmpSwap:
		a := pkt.Atomic()
		in.stream, in.msn = a.Stream(), a.MSN()
		in.msg = rxMessage{typ: pkt.Type(), msgLen: memreg.AtomicSize, rkey: a.RKey(), roff: a.RemoteOffset(),
			rsn: a.AtomicTag(), operand: a.Operand(), compare: a.Compare()}
	default:
		return in, false
	}
	in.msg.solicited = pkt.Common.Flags()&proto.FlagSolicited != 0
	return in, true
}

// checkMessage finds the packet's stream and its message in progress, if
// any. It checks the packet against the message's first packet (steps 10
// and 11). The stream is checked first, since the message is looked up on
// it. A packet of a message already complete, or further ahead than any
// window allows, is dropped; with RECUT, one of a message already complete
// is recorded as covered. A packet on a stream the connection does not
// have is refused.
func (r *receiver) checkMessage(pkt *proto.Packet, d *link.Datagram, plane int, in *arrival, at clock.Time) (*recvStream, *rxMessage, bool) {
	if int(in.stream) >= len(r.streams) {
		r.nack(pkt, plane, proto.NackBadStream, in.stream, in.msn)
		return nil, nil, false
	}
	st := &r.streams[in.stream]
	if in.msn-st.next >= r.dsn.size {
		if r.c.recut && st.next-in.msn <= 2*r.dsn.size && !in.msg.typ.IsRequest() {
			// A piece recut from a packet that arrived whole, after
			// which its message completed (spec section 6.5). The
			// messages after it have DSNs before the piece's, within a
			// window of its original's, or within a window after it.
			r.covered(pkt.Common, d.Size(), at)
		} else {
			r.stats.Inconsistent++
		}
		return nil, nil, false
	}
	m := st.msgs.get(st.next, in.msn)
	f := &in.msg
	if m != nil && f.typ.IsRequest() {
		// A READ_REQ or an atomic is one packet. Another for the same MSN
		// under a new DSN would take a second slot for one request, which
		// is served once; an atomic is never executed twice.
		r.stats.Inconsistent++
		return nil, nil, false
	}
	if m != nil && (m.typ != f.typ || m.msgLen != f.msgLen || m.rkey != f.rkey ||
		m.roff != f.roff || m.rsn != f.rsn || m.imm != f.imm) {
		r.stats.Inconsistent++
		return nil, nil, false
	}
	return st, m, true
}

// checkRegion looks up and checks the region that a WRITE, WRITE_IMM,
// READ_REQ or atomic names (steps 13 to 15). A SEND names no region, and
// gets nil.
//
// The region is held from here to the placement, so that a Deregister waits
// for it. It is released by hand on every way out. A deferred release would
// hold it through the completions the packet brings about, and an
// application may deregister the region from those.
func (r *receiver) checkRegion(pkt *proto.Packet, plane int, in *arrival, at clock.Time) (*memreg.Region, bool) {
	c := r.c
	f := &in.msg
	if f.typ == proto.TypeSend {
		return nil, true
	}
	want := memreg.RemoteWrite
	switch {
	case f.typ == proto.TypeReadReq:
		want = memreg.RemoteRead
	case f.typ.IsAtomic():
		want = memreg.RemoteAtomic
	}
	g, err := c.scope.Lookup(f.rkey, want)
	if err != nil {
		code := proto.NackBadKey
		if errors.Is(err, memreg.ErrAccess) {
			code = proto.NackAccess
		}
		r.nack(pkt, plane, code, in.stream, in.msn)
		return nil, false
	}
	bounds := g.CheckRange(f.roff, uint64(f.msgLen))
	if f.typ.IsAtomic() {
		bounds = g.CheckAtomic(f.roff)
	}
	if bounds != nil {
		g.Release()
		r.nack(pkt, plane, proto.NackBounds, in.stream, in.msn)
		return nil, false
	}
	return g, true
}

// checkReceive finds the posted receive that a SEND or WRITE_IMM consumes
// (step 16). That is the stream's own, or one handed out from a shared
// receive queue in RSN order. It returns the receive a SEND is placed into.
// A WRITE_IMM only consumes one.
func (r *receiver) checkReceive(pkt *proto.Packet, plane int, st *recvStream, in *arrival) (*recvEntry, bool) {
	f := &in.msg
	if f.typ != proto.TypeSend && f.typ != proto.TypeWriteImm {
		return nil, true
	}
	r.lastSend = int(in.stream)
	i := f.rsn - st.base
	if i >= uint32(len(st.recvs)-st.head) && !r.claimShared(st, i) {
		r.awaited.set(int(in.stream)) // the sender waits for this stream's receives now (credit.go)
		r.nack(pkt, plane, proto.NackRNR, in.stream, in.msn)
		return nil, false
	}
	rw := &st.recvs[st.head+int(i)]
	if f.typ != proto.TypeSend {
		return nil, true
	}
	if f.msgLen > rw.length {
		r.nack(pkt, plane, proto.NackBounds, in.stream, in.msn)
		return nil, false
	}
	return rw, true
}

// place copies the payload into its place, records the packet for the next
// ACK, and completes what the packet finishes (step 17).
func (r *receiver) place(pkt *proto.Packet, d *link.Datagram, at clock.Time, st *recvStream, m *rxMessage,
	in *arrival, region *memreg.Region, recv *recvEntry) {
	c := r.c
	h := pkt.Common
	payload := pkt.Payload
	if m == nil {
		m = r.newMessage()
		held := m.placed
		*m = in.msg
		m.placed = held // the storage of a message reused
		st.msgs.put(st.next, in.msn, m)
	}
	// Every byte of a message is placed once. A packet that would place
	// bytes already placed under another DSN is not the message's: an
	// honest sender segments a message once, and with RECUT cuts a DSN's
	// content only into pieces of it, so that a packet whose bytes are all
	// placed is a piece of one that arrived whole (spec section 6.5).
	if !in.msg.typ.IsRequest() && !m.placed.add(in.msgOff, uint32(len(payload)), int(r.dsn.size)) {
		release(region)
		if c.recut && m.placed.contains(in.msgOff, uint32(len(payload))) {
			r.covered(h, d.Size(), at)
			return
		}
		r.stats.Overlaps++
		return
	}
	var err error
	switch {
	case c.ep.cfg.PlaceholderPayloads:
		// The payload was checked as any payload (steps 13 to 16), and is
		// placed nowhere.
	case recv != nil:
		err = recv.scatter(in.msgOff, payload)
	default:
		err = region.Place(in.msg.roff+uint64(in.msgOff), payload)
	}
	release(region)
	if err != nil {
		panic("engine: placement outside checked bounds: " + err.Error())
	}
	urgent := r.recordPath(h, at)
	r.dsn.mark(h.DSN())
	r.observe(h, d.Size(), at)
	c.tp.placed()
	if in.msg.typ.IsRequest() {
		r.readsIn++
	}
	r.stats.Packets++
	r.stats.Bytes += uint64(len(payload))
	// The packet that places a message's last bytes is acknowledged at
	// once, as the one with AR is: over many paths the message's last
	// packet sent, which carries AR, often arrives before others, and the
	// sender's completion would wait out the ACK delay (spec section 6.6).
	finished := !in.msg.typ.IsRequest() && m.placed.covered() == m.msgLen
	if in.msn == st.next {
		r.complete(in.stream)
		if c.state == Closed {
			return // the peer broke the receive order, and the connection failed
		}
	}
	r.noteArrival(urgent || finished || h.Flags()&proto.FlagAckRequest != 0, at)
}

// covered records a data packet whose every byte a packet under another
// DSN placed before: with RECUT, a piece of a packet that was cut smaller
// on a resend and, as it turned out, arrived whole (spec section 6.5). It
// is recorded and acknowledged at once, as a duplicate is, and nothing is
// placed.
func (r *receiver) covered(h proto.CommonHeader, size int, at clock.Time) {
	r.stats.Covered++
	r.recordPath(h, at)
	r.dsn.mark(h.DSN())
	r.observe(h, size, at)
	r.ackNow()
}

// release ends the hold of a region looked up for a placement, if one was.
func release(g *memreg.Region) {
	if g != nil {
		g.Release()
	}
}

func (r *receiver) recordPath(h proto.CommonHeader, at clock.Time) bool {
	path := &r.paths[h.PathID()]
	if path.has && h.Epoch() == path.epoch && proto.SeqLess(path.highest+1, h.PSN()) {
		r.sawLoss() // a PSN skipped: lost, since a path delivers in order (spec section 6.2)
		// At most a round's worth, so that a hostile sender's leap of PSNs
		// cannot overflow the count.
		r.skipped += int(min(h.PSN()-path.highest-1, lossRound))
	}
	if r.recorded++; r.skipped+r.recorded >= lossRound {
		r.skipRate += (float64(r.skipped)/float64(r.skipped+r.recorded) - r.skipRate) / 4
		r.skipped, r.recorded = 0, 0
		r.echoes = recordEchoes(r.skipRate)
	}
	advances := path.advances(h.PSN())
	urgent := path.record(h.Epoch(), h.PSN())
	if advances || !r.c.ep.authed() {
		// In the authenticated mode only a new PSN gives the echo: a
		// repeated packet's timestamp is as old as the packet (spec
		// section 13.6).
		path.lastTS, path.lastAt = h.Timestamp(), at
	}
	if !path.dirty {
		path.dirty = true
		r.dirty = append(r.dirty, h.PathID())
	}
	return urgent
}

func (r *receiver) newMessage() *rxMessage {
	if n := len(r.free); n > 0 {
		m := r.free[n-1]
		r.free = r.free[:n-1]
		return m
	}
	return &rxMessage{}
}

// complete delivers, in MSN order, the messages of a stream that are fully
// placed. SEND and WRITE_IMM get a receive completion, WRITE none (spec
// section 6.5).
func (r *receiver) complete(stream uint16) {
	st := &r.streams[stream]
	for {
		if r.c.state == Closed {
			return // what ran last ended the connection: nothing more of the stream is served
		}
		m := st.msgs.get(st.next, st.next)
		if m == nil || !m.typ.IsRequest() && m.placed.covered() < m.msgLen {
			return
		}
		if m.typ == proto.TypeReadReq {
			// Its turn has come. Every earlier message of the stream is
			// placed, so the READ returns their data (spec section 6.5).
			r.c.snd.queueResponse(m.rkey, m.roff, m.msgLen, m.rsn)
			r.c.snd.pump()
		} else if m.typ.IsAtomic() {
			// Its turn has come too: the one execution (spec section 6.5).
			original, ok := r.execute(m)
			if !ok {
				return
			}
			r.c.snd.queueAtomicResponse(m.rsn, original)
			r.c.snd.pump()
		} else if m.typ == proto.TypeWrite {
			if o, ok := r.c.events.(WriteObserver); ok {
				o.WritePlaced(r.c, stream, m.msgLen)
			}
		} else {
			if m.rsn != st.base || st.head >= len(st.recvs) {
				r.c.fail(errors.New("engine: the peer consumed receives out of order"), StatusFlushed, true)
				return
			}
			rw := st.recvs[st.head]
			st.recvs[st.head] = recvEntry{}
			st.head++
			st.base++
			if st.head > 32 && st.head*2 > len(st.recvs) {
				n := copy(st.recvs, st.recvs[st.head:])
				clear(st.recvs[n:])
				st.recvs = st.recvs[:n]
				st.head = 0
			}
			r.c.report(Completion{ID: rw.id, Op: OpRecv, Stream: stream, Bytes: m.msgLen,
				Imm: m.imm, HasImm: m.typ == proto.TypeWriteImm, Solicited: m.solicited})
		}
		st.msgs.put(st.next, st.next, nil)
		m.placed.reset()
		*m = rxMessage{placed: m.placed}
		r.free = append(r.free, m)
		st.next++
	}
}

// claimShared hands shared receives, in order, to a stream's RSNs up to
// base+i. It reports whether RSN base+i has one. An RSN further ahead than
// any message window allows takes nothing, so that a hostile peer cannot
// drain the shared queue.
func (r *receiver) claimShared(st *recvStream, i uint32) bool {
	if r.srq == nil || i >= r.dsn.size || i-uint32(len(st.recvs)-st.head) >= uint32(r.srq.Len()) {
		return false
	}
	for uint32(len(st.recvs)-st.head) <= i {
		e, _ := r.srq.take()
		st.recvs = append(st.recvs, e)
	}
	return true
}

// execute performs an atomic whose turn has come, once, and returns the
// target's value before it (spec section 5.12). The region was checked when
// the request arrived. One deregistered since fails the connection, as a
// READ of it does.
func (r *receiver) execute(m *rxMessage) (uint64, bool) {
	c := r.c
	g, err := c.scope.Lookup(m.rkey, memreg.RemoteAtomic)
	if err != nil {
		c.fail(&ProtocolError{Code: proto.NackBadKey, Msg: "a region an atomic targets was deregistered"}, StatusFlushed, true)
		return 0, false
	}
	defer g.Release()
	var original uint64
	if m.typ == proto.TypeFetchAdd {
		original, err = g.FetchAdd(m.roff, m.operand)
	} else {
		original, err = g.CompareSwap(m.roff, m.compare, m.operand)
	}
	if err != nil {
		panic("engine: an atomic left its checked bounds: " + err.Error())
	}
	r.stats.Atomics++
	return original, true
}

// onResponse places READ or atomic response data at the requester, then
// records the packet. The steps of spec section 9 for READ_RESP and
// ATOMIC_RESP are the tag (step 13) and, for READ_RESP, the length (step
// 15).
func (r *receiver) onResponse(pkt *proto.Packet, plane int, at clock.Time) {
	c := r.c
	h := pkt.Common
	var code proto.NackCode
	if pkt.Type() == proto.TypeAtomicResp {
		a := pkt.AtomicResp()
		code = c.snd.onAtomicData(a.AtomicTag(), a.Original())
	} else {
		rs := pkt.ReadResp()
		code = c.snd.onReadData(rs.ReadTag(), rs.MsgOffset(), rs.MsgLen(), pkt.Payload)
	}
	switch code {
	case 0:
	case overlapping:
		r.stats.Overlaps++
		return
	case covering:
		r.covered(h, len(pkt.Bytes())+pkt.Pad(), at)
		return
	default:
		r.nack(pkt, plane, code, 0, 0)
		return
	}
	urgent := r.recordPath(h, at)
	r.dsn.mark(h.DSN())
	r.observe(h, len(pkt.Bytes())+pkt.Pad(), at) // its whole size, a placeholder's too
	c.tp.placed()
	r.stats.Packets++
	r.stats.Bytes += uint64(len(pkt.Payload))
	r.noteArrival(urgent || h.Flags()&proto.FlagAckRequest != 0, at)
}

// nack refuses a data packet (spec section 7). Nothing is placed or
// recorded, so the packet's PSN stays clear in its path's bitvector.
func (r *receiver) nack(pkt *proto.Packet, plane int, code proto.NackCode, stream uint16, msn uint32) {
	c := r.c
	r.stats.Nacks[code&15]++
	c.tp.nacked(pkt.Common.PSN())
	var out proto.Packet
	c.build(&out, proto.TypeNack, 0, 0)
	out.Common.SetDstConnID(c.peerID)
	n := out.Nack()
	n.SetCode(code)
	n.SetPathID(pkt.Common.PathID())
	n.SetEpoch(pkt.Common.Epoch())
	n.SetPSN(pkt.Common.PSN())
	n.SetDSN(pkt.Common.DSN())
	n.SetStream(stream)
	n.SetMSN(msn)
	if code == proto.NackRNR {
		n.SetRetryAfter(rnrRetryMicros)
	}
	c.emit(&out, plane, c.ep.cfg.SourcePorts[0])
}
