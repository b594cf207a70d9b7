// Outgoing messages. This file posts them, cuts them into DSNs per stream,
// and completes them in MSN order per stream (spec section 6.5).

package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

// message is a message on its way out. It is a posted WRITE, WRITE_IMM,
// SEND, READ or atomic, or a READ or atomic response this side sends as
// responder.
type message struct {
	// The request and the local buffers its bytes come from or go to.
	typ      proto.Type
	wr       SendWR
	list     sgl    // the local buffers
	one      [1]SGE // list's storage when the request has one buffer
	internal bool   // a response, with no completion for the application

	// Its place on its stream, and its size.
	msn    uint32
	rsn    uint32
	length uint32

	// Progress.
	next    uint32 // offset of the next first transmission
	allSent bool
	unacked int  // DSNs of it sent and not yet acknowledged
	cut     int  // pieces cut from its DSNs (recut) that wait for DSNs of their own
	done    bool // acknowledged, or failed
	failed  bool // already reported with an error status

	// READs and atomics. The tag names the request at both ends. The
	// requester counts the response bytes that arrived. A READ's responder
	// reads from srcOff in the region srcKey; an atomic's responder sends
	// original, the result of its one execution.
	tag        uint32
	readPlaced spans // the READ's data arrived, as ranges
	readDone   bool  // every byte of the response arrived
	srcKey     uint64
	srcOff     uint64
	original   uint64
}

// finished reports whether every part of the message is done. Every DSN is
// acknowledged and, for a READ or an atomic, the response has arrived.
func (m *message) finished() bool {
	return m.allSent && m.unacked == 0 && m.cut == 0 && (!m.typ.IsRequest() || m.readDone)
}

// sendStream is one stream's outgoing messages, in MSN order.
type sendStream struct {
	msn, rsn uint32     // the next MSN and RSN to give
	queue    []*message // not yet completed, from head
	head     int
	sendIdx  int // the first message with bytes never sent

	// refused counts the stream's DSNs that the receiver refused with RNR
	// or RESOURCE and has not acknowledged since. While there are any, the
	// stream sends no new data, which would be refused for the same reason
	// (spec section 7). The oldest refused DSN is the probe. It is resent
	// after the receiver's RetryAfter, backed off, to find out when the
	// receiver is ready. The others wait, with retryAt Never, until the
	// probe is accepted. RoCE's RNR retry likewise goes back to the oldest
	// refused PSN. A receiver that stays unready then costs one packet per
	// retry, not one per refused packet.
	refused int
	probing bool
	probe   uint32

	// Receive credit (credit.go): on a limited stream no packet of a SEND
	// or WRITE_IMM at or past limit, in the low 16 bits of its RSN, goes,
	// except the one the credit wait let through: message overdrawRSN's
	// packet at offset overdrawAt.
	limited     bool
	named       bool // an ACK named the stream's limit
	limit       uint16
	overdraw    bool
	overdrawRSN uint32
	overdrawAt  uint32
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
	case OpFetchAdd:
		typ = proto.TypeFetchAdd
	case OpCmpSwap:
		typ = proto.TypeCmpSwap
	default:
		return fmt.Errorf("engine: cannot post %v on the send side", wr.Op)
	}
	if typ.IsAtomic() && !c.atomics {
		return fmt.Errorf("engine: %v not allowed: the connection did not negotiate ATOMICS", wr.Op)
	}
	if typ.IsRequest() && c.readsOut == 0 {
		return fmt.Errorf("engine: %v not allowed: the peer serves no READs or atomics", wr.Op)
	}
	if int(wr.Stream) >= c.streams {
		return fmt.Errorf("engine: stream %d: the connection has %d", wr.Stream, c.streams)
	}
	m := &message{wr: wr, typ: typ}
	m.list = gatherList(wr.Local, wr.SGL, &m.one)
	var need memreg.Access
	if typ.IsRequest() {
		need = memreg.LocalWrite // the response lands there
	}
	length, err := m.list.check(c.pd, need)
	if err != nil {
		return err
	}
	if typ.IsAtomic() && length != memreg.AtomicSize {
		return fmt.Errorf("engine: %v: local buffer of %d bytes, want %d for the result", wr.Op, length, memreg.AtomicSize)
	}
	m.length = length
	st := &s.streams[wr.Stream]
	m.msn = st.msn
	st.msn++
	switch typ {
	case proto.TypeSend, proto.TypeWriteImm:
		m.rsn = st.rsn
		st.rsn++
	case proto.TypeReadReq, proto.TypeFetchAdd, proto.TypeCmpSwap:
		m.tag = s.nextTag // READs and atomics share the tag space (spec section 5.12)
		s.nextTag++
		s.reads[m.tag] = m
	}
	s.equip()
	st.queue = append(st.queue, m)
	s.ready.set(int(wr.Stream))
	s.msgs++
	if !typ.IsRequest() {
		s.unsent += uint64(m.length)
	}
	return nil
}

// queueResponse queues the READ_RESP packets that answer a READ_REQ. They
// carry the responder's own data in its own sequence spaces (spec section
// 5.4), on the internal stream.
func (s *sender) queueResponse(rkey, roff uint64, length, tag uint32) {
	s.equip()
	m := &message{length: length, typ: proto.TypeReadResp, tag: tag,
		srcKey: rkey, srcOff: roff, internal: true}
	st := &s.streams[s.respStream]
	st.queue = append(st.queue, m)
	s.ready.set(s.respStream)
	s.msgs++
	s.unsent += uint64(length)
	s.c.madeProgress(false)
}

// queueAtomicResponse queues the ATOMIC_RESP that carries an atomic's
// result, on the internal stream. The message keeps the result until the
// requester acknowledges it, and every resend carries it: it is the
// result cache that answers a repeated request (spec section 6.5).
func (s *sender) queueAtomicResponse(tag uint32, original uint64) {
	s.equip()
	m := &message{typ: proto.TypeAtomicResp, tag: tag, original: original, internal: true}
	st := &s.streams[s.respStream]
	st.queue = append(st.queue, m)
	s.ready.set(s.respStream)
	s.msgs++
	s.c.madeProgress(false)
}

// nextMessage picks the next stream with bytes to send, round robin. A
// stream whose next message is a READ waits while the READ limit is
// reached, and one whose next SEND or WRITE_IMM has no receive credit
// waits for it. It looks only at the streams marked ready, because most of a
// connection's streams are idle. It unmarks those it finds with nothing to
// send.
func (s *sender) nextMessage() *message {
	n := len(s.streams)
	from := s.rrStream % n
	for _, span := range [2][2]int{{from, n}, {0, from}} {
		for k := s.ready.next(span[0], span[1]); k >= 0; k = s.ready.next(k+1, span[1]) {
			st := &s.streams[k]
			if st.sendIdx >= len(st.queue) || st.refused > 0 {
				s.ready.clear(k) // until a post, or until its refused DSNs are accepted
				continue
			}
			m := st.queue[st.sendIdx]
			if m.typ.IsRequest() && s.readsActive >= s.c.readsOut {
				continue
			}
			if st.heldByCredit(m) {
				s.holdForCredit(k)
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

// copyPayload fills a packet's payload from the message's source. That is
// the posted local buffer or, for a READ response, the region the peer
// reads. The region is looked up again for every packet, so that a region
// deregistered in the middle of a response is never read.
func (s *sender) copyPayload(m *message, r *dsnRecord, payload []byte) bool {
	if len(payload) == 0 {
		return true
	}
	if m.typ == proto.TypeReadResp {
		g, err := s.c.scope.Lookup(m.srcKey, memreg.RemoteRead)
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

// overlapping is onReadData's answer to a response some of whose bytes
// arrived already: no NACK, and the packet is not recorded. covering is
// its answer, with RECUT, to one whose bytes all arrived already, or whose
// READ has completed: a piece of a response that arrived whole, recorded
// and not placed (spec section 6.5).
const (
	overlapping proto.NackCode = 0xff
	covering    proto.NackCode = 0xfe
)

// onReadData places READ response data at the requester (spec section 9,
// steps 13 to 15 for READ_RESP). It returns the NACK code that refuses the
// data, or 0.
func (s *sender) onReadData(tag, off, length uint32, payload []byte) proto.NackCode {
	m := s.reads[tag]
	if m == nil {
		if s.c.recut && proto.SeqLess(tag, s.nextTag) {
			return covering // tags go in order, so this READ or atomic has completed
		}
		return proto.NackBadTag
	}
	if m.typ != proto.TypeReadReq || !m.allSent {
		// An atomic's tag (spec section 6.5), or a READ not yet sent, whose
		// answer can only be forged.
		return proto.NackBadTag
	}
	if length != m.length {
		return proto.NackBounds
	}
	// Each byte of a READ's data arrives once. A response that would place
	// bytes already placed under another DSN is dropped, so that the READ
	// completes only with every byte in place.
	if !m.readPlaced.add(off, uint32(len(payload)), int(s.c.rcv.dsn.size)) {
		if s.c.recut && m.readPlaced.contains(off, uint32(len(payload))) {
			return covering
		}
		return overlapping
	}
	if !s.c.ep.cfg.PlaceholderPayloads { // else there is nothing to place, and the decoder checked off+len against length
		if err := m.list.scatter(off, payload); err != nil {
			return proto.NackBounds // checked at post, so this is a bug
		}
	}
	if m.readPlaced.covered() >= length && !m.readDone {
		s.answered(m)
	}
	return 0
}

// onAtomicData places an atomic's result at the requester (spec section 9,
// steps 13 and 17 for ATOMIC_RESP). It returns the NACK code that refuses
// it, or 0. A repeated response is a duplicate DSN, caught before this.
func (s *sender) onAtomicData(tag uint32, original uint64) proto.NackCode {
	m := s.reads[tag]
	if m == nil || !m.typ.IsAtomic() || !m.allSent {
		return proto.NackBadTag // no atomic, a READ, or an atomic not yet sent
	}
	var value [memreg.AtomicSize]byte
	binary.BigEndian.PutUint64(value[:], original)
	if err := m.list.scatter(0, value[:]); err != nil {
		return proto.NackBounds // checked at post, so this is a bug
	}
	s.answered(m)
	return 0
}

// answered ends a READ or atomic whose response has all arrived: its slot
// of the READ limit is free, and it completes once acknowledged.
func (s *sender) answered(m *message) {
	m.readDone = true
	s.readsActive--
	delete(s.reads, m.tag)
	s.c.madeProgress(true)
	if m.finished() {
		m.done = true
		s.complete(uint16(s.streamOf(m)))
	}
	s.pump() // a slot is free, so the next READ or atomic may go
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

// failMessage completes one message with an error status now.
func (s *sender) failMessage(m *message, st Status, err error) {
	if m.done {
		return
	}
	m.done, m.failed = true, true
	if m.typ.IsRequest() {
		delete(s.reads, m.tag)
	}
	if !m.internal { // a response is the transport's own, with no work request to complete
		s.c.report(Completion{ID: m.wr.ID, Op: m.wr.Op, Status: st, Stream: m.wr.Stream, Bytes: m.length, Err: err})
	}
}

// report hands a completion to the connection's events.
func (c *Conn) report(wc Completion) {
	if c.events != nil {
		c.events.Completion(c, wc)
	}
}
