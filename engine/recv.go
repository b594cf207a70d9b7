package engine

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

// recvPath is the receiver's state of one of the peer's paths (spec
// section 6.3): what the ACK record for it says.
type recvPath struct {
	has     bool // a data packet was recorded
	epoch   uint8
	highest uint32
	bits    bitvec256
	ce      uint32     // CE-marked data packets, all epochs
	lastTS  uint32     // Timestamp of the latest arrival
	lastAt  clock.Time // its arrival
	dirty   bool       // recorded something since the last ACK
}

// record notes PSN psn of epoch e; it reports whether the arrival calls for
// an immediate ACK (it is not the PSN after the highest).
func (p *recvPath) record(e uint8, psn uint32) bool {
	switch {
	case !p.has:
		p.has, p.epoch, p.highest, p.bits = true, e, psn, bitvec256{}
		return false
	case e == p.epoch:
		if proto.SeqLess(p.highest, psn) {
			d := psn - p.highest
			p.bits.advance(d)
			p.highest = psn
			return d != 1
		}
		if k := p.highest - 1 - psn; psn != p.highest && k < 256 {
			p.bits.set(int(k))
		}
		return true
	case proto.SeqLess(p.highest, psn): // the sender repathed: tell it at once
		p.epoch, p.highest, p.bits = e, psn, bitvec256{}
		return true
	}
	return false // a late packet of an earlier route: not recorded
}

// rxMessage is a message being received: the fields of its first accepted
// packet, which every later packet must match, and the bytes placed.
type rxMessage struct {
	typ       proto.Type
	msgLen    uint32
	rkey      uint64
	roff      uint64
	rsn, imm  uint32
	placed    uint32
	solicited bool
}

// recvStream is one stream's receive side.
type recvStream struct {
	next  uint32 // the next MSN to complete
	base  uint32
	msgs  msgRing
	recvs []recvEntry // posted receives, from head: RSN base, base+1, ...
	head  int
}

// msgRing holds a stream's messages in progress by MSN, from the stream's
// next: MSN msn in slot msn & (len - 1). It starts empty and doubles when a
// message arrives further ahead than it reaches, which the DSN window
// bounds: a peer can grow it to a pointer per DSN of the window (16 KiB a
// stream at the default 2,048), no further, and it does not shrink. A
// slice, not a map: every data packet looks its message up.
type msgRing []*rxMessage

// initialMsgRing is a stream's first ring of messages.
const initialMsgRing = 4

// get is message msn, or nil.
func (q msgRing) get(next, msn uint32) *rxMessage {
	if msn-next >= uint32(len(q)) {
		return nil
	}
	return q[msn&uint32(len(q)-1)]
}

// put sets message msn (msn - next less than the DSN window).
func (q *msgRing) put(next, msn uint32, m *rxMessage) {
	if msn-next >= uint32(len(*q)) {
		q.grow(next, msn-next+1)
	}
	(*q)[msn&uint32(len(*q)-1)] = m
}

// grow doubles the ring until it reaches reach messages from next.
func (q *msgRing) grow(next, reach uint32) {
	n := max(len(*q), initialMsgRing)
	for uint32(n) < reach {
		n *= 2
	}
	ring := make(msgRing, n)
	for i := range uint32(len(*q)) {
		ring[(next+i)&uint32(n-1)] = q.get(next, next+i)
	}
	*q = ring
}

// recvEntry is a posted receive: its id and buffers.
type recvEntry struct {
	id     uint64
	local  SGE
	list   []SGE // when the request gave a list
	length uint32
}

// scatter places src at message offset off in the receive's buffers.
func (e *recvEntry) scatter(off uint32, src []byte) error {
	if e.list != nil {
		return sgl(e.list).scatter(off, src)
	}
	one := [1]SGE{e.local}
	return sgl(one[:]).scatter(off, src)
}

// ReceiverStats counts a connection's receiving.
type ReceiverStats struct {
	Packets      uint64 // data packets placed
	Bytes        uint64
	CE           uint64
	AcksSent     uint64
	Duplicates   uint64
	OutOfWindow  uint64
	OutOfOrder   uint64 // baseline mode: PSNs after the expected one, dropped
	Inconsistent uint64 // disagreed with their message's first packet
	BadPath      uint64 // path id beyond the negotiated count, or too long
	Nacks        [16]uint64
}

type receiver struct {
	// What every data packet and ACK reads first, then its counts.
	c        *Conn
	ready    bool
	repeat   bool // the ack timer is set to repeat the last ACK
	pending  int  // data packets since the last ACK
	ackPlane int
	ackPort  int
	paths    []recvPath
	dsn      dsnWindow
	streams  []recvStream
	share    *cc.Member // in the endpoint's InboundCapacity allocation (its rate hints); nil without one
	dirty    []uint8
	stats    ReceiverStats
	free     []*rxMessage
	readsIn  int  // READs accepted and not yet fully answered
	srq      *SRQ // where receives come from, when shared
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
	for i := range r.streams {
		if i < len(old) {
			r.streams[i].recvs = old[i].recvs
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
	return nil
}

// onData runs a data packet through steps 8-17 of spec section 9.
func (r *receiver) onData(pkt *proto.Packet, d *link.Datagram, plane int, at clock.Time) {
	c := r.c
	h := pkt.Common
	if d.Size() > c.maxPacket || int(h.PathID()) >= len(r.paths) {
		r.stats.BadPath++
		return
	}
	path := &r.paths[h.PathID()]
	if d.ECN == link.CE && !(c.ep.cfg.Broken.MiscountCE && h.PSN()%16 == 0) {
		path.ce++
		r.stats.CE++
	}
	r.ackPlane = plane
	if c.isBaseline() && !r.gate(h, d, plane, at) {
		return
	}
	dsn := h.DSN()
	switch r.dsn.check(dsn) {
	case dsnOutOfWindow:
		r.stats.OutOfWindow++
		return
	case dsnDuplicate:
		r.stats.Duplicates++
		r.recordPath(h, at)
		r.ackNow()
		return
	}

	// The message this packet belongs to.
	var f rxMessage
	var stream uint16
	var msn, msgOff uint32
	switch pkt.Type() {
	case proto.TypeWrite, proto.TypeWriteImm:
		w := pkt.Write()
		stream, msn, msgOff = w.Stream(), w.MSN(), w.MsgOffset()
		f = rxMessage{typ: pkt.Type(), msgLen: w.MsgLen(), rkey: w.RKey(), roff: w.RemoteOffset()}
		if pkt.Type() == proto.TypeWriteImm {
			f.rsn, f.imm = pkt.Imm().RSN(), pkt.Imm().Immediate()
		}
	case proto.TypeSend:
		sh := pkt.Send()
		stream, msn, msgOff = sh.Stream(), sh.MSN(), sh.MsgOffset()
		f = rxMessage{typ: proto.TypeSend, msgLen: sh.MsgLen(), rsn: sh.RSN()}
	case proto.TypeReadReq:
		rq := pkt.ReadReq()
		stream, msn = rq.Stream(), rq.MSN()
		f = rxMessage{typ: proto.TypeReadReq, msgLen: rq.MsgLen(), rkey: rq.RKey(), roff: rq.RemoteOffset(), rsn: rq.ReadTag()}
	case proto.TypeReadResp:
		r.onReadResp(pkt, plane, at)
		return
	default:
		r.nack(pkt, plane, proto.NackUnsupported, 0, 0)
		return
	}
	f.solicited = h.Flags()&proto.FlagSolicited != 0

	// Step 10: consistency with the message's first packet.
	var st *recvStream
	var m *rxMessage
	if int(stream) < len(r.streams) {
		st = &r.streams[stream]
		if msn-st.next >= r.dsn.size { // already complete, or further ahead than any window allows
			r.stats.Inconsistent++
			return
		}
		if m = st.msgs.get(st.next, msn); m != nil && (m.typ != f.typ || m.msgLen != f.msgLen || m.rkey != f.rkey ||
			m.roff != f.roff || m.rsn != f.rsn || m.imm != f.imm) {
			r.stats.Inconsistent++
			return
		}
	}
	// Step 11: stream.
	if st == nil {
		r.nack(pkt, plane, proto.NackBadStream, stream, msn)
		return
	}
	// Step 12: operation allowed.
	if f.typ == proto.TypeReadReq && r.readsIn >= c.ep.cfg.MaxReadsIn {
		r.nack(pkt, plane, proto.NackReadLimit, stream, msn)
		return
	}
	// Steps 13-15: key, access, bounds of a WRITE's or READ's region.
	payload := pkt.Payload
	var region *memreg.Region
	var dst uint64
	var recv *recvEntry
	if f.typ != proto.TypeSend {
		want := memreg.RemoteWrite
		if f.typ == proto.TypeReadReq {
			want = memreg.RemoteRead
		}
		g, err := c.pd.Lookup(f.rkey, want)
		if err != nil && c.ep.cfg.Broken.SkipKeyCheck && errors.Is(err, memreg.ErrBadKey) {
			// A deliberate bug: taken as received, placed nowhere.
			r.noteArrival(r.recordPath(h, at) || h.Flags()&proto.FlagAckRequest != 0, at)
			return
		}
		if err != nil {
			code := proto.NackBadKey
			if errors.Is(err, memreg.ErrAccess) {
				code = proto.NackAccess
			}
			r.nack(pkt, plane, code, stream, msn)
			return
		}
		// The region is held from here to its placement (a Deregister
		// waits for it) and released on every way out, by hand: a
		// deferred release held it through the completions the packet
		// brings about, where an application may deregister it
		// (WritePlaced), and cost 1% of a simulation's instructions.
		if g.CheckRange(f.roff, uint64(f.msgLen)) != nil {
			g.Release()
			r.nack(pkt, plane, proto.NackBounds, stream, msn)
			return
		}
		region, dst = g, f.roff+uint64(msgOff)
	}
	// Step 16: the posted receive.
	if f.typ == proto.TypeSend || f.typ == proto.TypeWriteImm {
		i := f.rsn - st.base
		if i >= uint32(len(st.recvs)-st.head) && !r.claimShared(st, i) {
			release(region)
			r.nack(pkt, plane, proto.NackRNR, stream, msn)
			return
		}
		rw := &st.recvs[st.head+int(i)]
		if f.typ == proto.TypeSend {
			if f.msgLen > rw.length {
				release(region)
				r.nack(pkt, plane, proto.NackBounds, stream, msn)
				return
			}
			recv = rw
		}
	}
	// Step 17: place and record.
	var err error
	switch {
	case c.ep.cfg.PlaceholderPayloads:
		// Checked as any payload (steps 13-16), placed nowhere.
	case recv != nil:
		err = recv.scatter(msgOff, payload)
	default:
		err = region.Place(dst, payload)
	}
	release(region)
	if err != nil {
		panic("engine: placement outside checked bounds: " + err.Error())
	}
	urgent := r.recordPath(h, at)
	r.dsn.mark(dsn)
	r.observe(h, d.Size(), at)
	if c.isBaseline() {
		c.bl.expected++ // the in-order PSN gate's (a cold line otherwise)
	}
	if m == nil {
		m = r.newMessage()
		*m = f
		st.msgs.put(st.next, msn, m)
	}
	m.placed += uint32(len(payload))
	if f.typ == proto.TypeReadReq {
		m.placed = m.msgLen // nothing to place: it waits only for its turn
		r.readsIn++
	}
	r.stats.Packets++
	r.stats.Bytes += uint64(len(payload))
	if msn == st.next {
		r.complete(stream)
		if c.state == Closed {
			return // the peer broke the receive order: the connection failed
		}
	}
	r.noteArrival(urgent || h.Flags()&proto.FlagAckRequest != 0, at)
}

// release ends the hold of a region looked up for a placement, if one was.
func release(g *memreg.Region) {
	if g != nil {
		g.Release()
	}
}

func (r *receiver) recordPath(h proto.CommonHeader, at clock.Time) bool {
	path := &r.paths[h.PathID()]
	urgent := path.record(h.Epoch(), h.PSN())
	path.lastTS, path.lastAt = h.Timestamp(), at
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
// placed: a receive completion for SEND and WRITE_IMM, nothing for WRITE.
func (r *receiver) complete(stream uint16) {
	st := &r.streams[stream]
	for {
		m := st.msgs.get(st.next, st.next)
		if m == nil || m.placed < m.msgLen {
			return
		}
		if m.typ == proto.TypeReadReq {
			// Its turn: every earlier message of the stream is placed, so
			// the READ sees them (spec section 6.5).
			r.c.snd.queueResponse(m.rkey, m.roff, m.msgLen, m.rsn)
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
		*m = rxMessage{}
		r.free = append(r.free, m)
		st.next++
	}
}

// claimShared hands shared receives to a stream's RSNs up to base+i, in
// order; it reports whether RSN base+i has one. An RSN further ahead than
// any message window allows takes nothing, so a hostile peer cannot drain
// the shared queue.
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

// onReadResp places READ response data at the requester (spec section 9
// with the READ_RESP steps: tag, length), then records the packet.
func (r *receiver) onReadResp(pkt *proto.Packet, plane int, at clock.Time) {
	c := r.c
	h := pkt.Common
	rs := pkt.ReadResp()
	if code := c.snd.onReadData(rs.ReadTag(), rs.MsgOffset(), rs.MsgLen(), pkt.Payload); code != 0 {
		r.nack(pkt, plane, code, 0, 0)
		return
	}
	urgent := r.recordPath(h, at)
	r.dsn.mark(h.DSN())
	r.observe(h, len(pkt.Bytes())+pkt.Pad(), at) // its whole size, a placeholder's too
	if c.isBaseline() {
		c.bl.expected++
	}
	r.stats.Packets++
	r.stats.Bytes += uint64(len(pkt.Payload))
	r.noteArrival(urgent || h.Flags()&proto.FlagAckRequest != 0, at)
}

// observe feeds the sender's declared backlog to the endpoint's allocator,
// whose share is the rate hint of this connection's ACKs.
func (r *receiver) observe(h proto.CommonHeader, size int, at clock.Time) {
	if r.share != nil && !r.c.isBaseline() {
		r.share.Observe(proto.DecodeBacklog(h.Backlog()), size, int64(at))
	}
}

// hint is the rate hint for this connection's ACKs (spec section 5.5).
func (r *receiver) hint() uint64 {
	if r.share == nil || r.c.isBaseline() {
		return proto.RateNoLimit // the baseline sends all-ones (spec section 10)
	}
	return max(1, uint64(r.share.Share())) // 0 would mean stop
}

// noteArrival decides when to acknowledge a recorded data packet.
func (r *receiver) noteArrival(now bool, at clock.Time) {
	c := r.c
	r.pending++
	switch {
	case now || r.pending >= c.ep.cfg.AckEvery:
		r.ackNow()
	case c.ackTimer.Deadline() == clock.Never || r.repeat:
		r.repeat = false
		c.ackTimer.Reset(at.Add(c.ep.cfg.AckDelay))
	}
}

// nack refuses a data packet (spec section 7): nothing is placed or recorded.
func (r *receiver) nack(pkt *proto.Packet, plane int, code proto.NackCode, stream uint16, msn uint32) {
	c := r.c
	r.stats.Nacks[code&15]++
	if bl := &r.c.bl; r.c.isBaseline() && pkt.Common.PSN() == bl.expected {
		// The expected packet was refused: the packets behind it are a gap
		// the sender knows of already; no SEQ_ERR for them.
		bl.nakSent, bl.nakAt = true, r.c.ep.clock.Now()
	}
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

// rnrRetryMicros is how long a sender refused with RNR waits, in µs.
const rnrRetryMicros = 100

func (r *receiver) ackNow() { r.sendAck(r.ackPlane, true) }

// sendAck sends ACKs carrying the records of every path that recorded data
// since the last ACK (all of them with records unset: the handshake's empty
// ACK).
func (r *receiver) sendAck(plane int, records bool) {
	c := r.c
	if !c.knows(plane) {
		plane = c.firstPlane()
	}
	maxRecords := min(proto.MaxAckRecords, (c.maxPacket-proto.CommonHeaderLen-proto.AckHeaderLen-proto.TrailerLen)/proto.AckRecordLen)
	now := c.ep.clock.Now()
	for first := true; first || records && len(r.dirty) > 0; first = false {
		n := 0
		if records {
			n = min(len(r.dirty), maxRecords)
		}
		var pkt proto.Packet
		c.build(&pkt, proto.TypeAck, n, 0)
		pkt.Common.SetDstConnID(c.peerID)
		ack := pkt.Ack()
		ack.SetCumDSN(r.dsn.cum)
		ack.SetRateHint(r.hint())
		for i := 0; i < n; i++ {
			id := r.dirty[i]
			p := &r.paths[id]
			p.dirty = false
			rec := pkt.AckRecord(i)
			rec.SetPathID(id)
			rec.SetEpoch(p.epoch)
			rec.SetHighestPSN(p.highest)
			rec.SetCECount(p.ce)
			rec.SetEchoTimestamp(p.lastTS)
			rec.SetServiceTime(uint32(min(now-p.lastAt, 1<<32-1)))
			p.bits.write(rec)
			if c.ep.cfg.Broken.IgnoreSACKBit {
				rec.ClearReceived(0) // the PSN below the highest, never reported (a deliberate bug)
			}
		}
		r.dirty = r.dirty[:copy(r.dirty, r.dirty[n:])]
		// Acks rotate over the source ports so that they spread over the
		// plane's routes like the data they answer.
		r.ackPort = (r.ackPort + 1) % len(c.ep.cfg.SourcePorts)
		c.emit(&pkt, plane, c.ep.cfg.SourcePorts[r.ackPort])
		r.stats.AcksSent++
	}
	r.pending = 0
	c.ackTimer.Stop()
	if records {
		// If the sender goes quiet, say it all once more: an ACK lost at the
		// tail of a transfer would otherwise cost a tail probe, a resend of
		// data that arrived. (repeatAck disarms this for its own ACK.)
		r.repeat = true
		c.ackTimer.Reset(now.Add(ackRepeatAfter * c.ep.cfg.AckDelay))
	}
}

// ackRepeatAfter is how many ACK delays of quiet after an ACK the receiver
// repeats it.
const ackRepeatAfter = 4

// repeatAck sends once more the records of every path, after a quiet spell.
func (r *receiver) repeatAck() {
	for id := range r.paths {
		if p := &r.paths[id]; p.has && !p.dirty {
			p.dirty = true
			r.dirty = append(r.dirty, uint8(id))
		}
	}
	r.sendAck(r.ackPlane, true)
	r.repeat = false
	r.c.ackTimer.Stop()
}

// onProbe answers a PROBE over its own 5-tuple, reversed.
func (r *receiver) onProbe(pkt *proto.Packet, d *link.Datagram, plane int, at clock.Time) {
	c := r.c
	var out proto.Packet
	c.build(&out, proto.TypeProbeReply, 0, 0)
	out.Common.SetDstConnID(c.peerID)
	out.Common.SetPathID(pkt.Common.PathID())
	out.Common.SetEpoch(pkt.Common.Epoch())
	pr := out.ProbeReply()
	pr.SetProbeID(pkt.Probe().ProbeID())
	pr.SetEchoTimestamp(pkt.Common.Timestamp())
	pr.SetServiceTime(uint32(min(c.ep.clock.Now()-at, 1<<32-1)))
	c.ep.send(link.Datagram{
		Src:  netip.AddrPortFrom(c.ep.cfg.Planes[plane], d.Dst.Port()),
		Dst:  d.Src,
		DSCP: proto.DefaultDSCP(proto.TypeProbeReply),
		Data: c.ep.seal(&out),
	})
}

// flush completes every posted receive with a flush status; shared
// receives taken but never filled go back to their queue.
func (r *receiver) flush(err error) {
	for i := range r.streams {
		st := &r.streams[i]
		if r.srq != nil {
			r.srq.giveBack(st.recvs[st.head:])
		} else {
			for _, rw := range st.recvs[st.head:] {
				r.c.report(Completion{ID: rw.id, Op: OpRecv, Status: StatusFlushed, Stream: uint16(i), Err: err})
			}
		}
		st.recvs, st.head = nil, 0
	}
}

// ReceiverStats returns the connection's receiving counters.
func (c *Conn) ReceiverStats() ReceiverStats { return c.rcv.stats }
