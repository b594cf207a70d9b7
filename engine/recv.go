package engine

import (
	"errors"
	"fmt"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

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
