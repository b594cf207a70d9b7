// The sender's DSN ring. It records what each DSN in flight carries and
// whether it is acknowledged (spec section 6.5).

package engine

import (
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/proto"
)

// dsnRecord is what the sender keeps per DSN in flight. It keeps no copy of
// the payload. A retransmission carries exactly the original's content, or
// after a recut its first part (spec section 6.5), so it is rebuilt from
// the source buffer.
type dsnRecord struct {
	// The content, bytes off to off+n of msg.
	msg *message
	off uint32
	n   uint32

	// The latest transmission.
	path uint8
	psn  uint32

	acked  bool
	queued bool // in the retransmit queue
	// overflowed: a transmission of the first window of one BDP was lost
	// while the receiver was the bottleneck, so the resend is paced
	// (lostOvertaken).
	overflowed bool

	// Refusals with RNR or RESOURCE. A refused DSN waits and is resent at
	// retryAt. Each refusal doubles the wait.
	waiting  bool
	refusals uint8
	retryAt  clock.Time
}

// record returns the record of DSN d if d is in flight.
func (s *sender) record(d uint32) *dsnRecord {
	if d-s.una >= s.nextDSN-s.una {
		return nil
	}
	return &s.ring[d&s.mask]
}

// growRing doubles the DSN ring and moves the records in flight to their
// places in the larger one. The window check before newDSN keeps the ring
// within the window.
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
	// Each new packet is as large as the path MTU search allows now.
	n := min(s.payloadMax(m.typ), m.length-m.next)
	if m.typ.IsRequest() {
		n = 0 // a READ or atomic is one packet with no payload; the data comes back
		s.readsActive++
	}
	r := &s.ring[d&s.mask]
	*r = dsnRecord{msg: m, off: m.next, n: n}
	m.next += n
	m.unacked++
	s.unsent -= uint64(n)
	if m.next == m.length || m.typ.IsRequest() {
		m.allSent = true
		s.streams[s.streamOf(m)].sendIdx++
		if m.typ == proto.TypeReadResp || m.typ == proto.TypeAtomicResp {
			s.c.rcv.readsIn-- // served, so the responder's READ or atomic is no longer outstanding (spec section 6.5)
		}
	}
	return r
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
		st.refused-- // accepted at last; the stream may send again when none is left
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

// payloadMax is the most payload a packet of type typ carries now: what
// the largest packet the connection sends leaves after the headers.
func (s *sender) payloadMax(typ proto.Type) uint32 {
	hlen, _ := proto.HeaderLen(typ, 0)
	return uint32(s.c.sendMax - hlen - s.c.trailerLen())
}

// cutPiece is content cut from a DSN by recut that waits for a DSN of its
// own: bytes off to off+n of msg.
type cutPiece struct {
	msg *message
	off uint32
	n   uint32
}

// recut cuts a DSN's content, r, down to most bytes, what the path MTU
// lets through now, when the MTU fell below the packet it was cut into
// (spec section 6.7, with RECUT negotiated). The DSN keeps the first
// bytes, and the rest waits for new DSNs (newCutDSN), which take their
// place in the DSN window as new data does. An earlier, larger copy of the
// DSN may still arrive: the receiver then takes the new DSNs as bytes
// already placed (spec section 6.5).
func (s *sender) recut(r *dsnRecord, most uint32) {
	s.cuts = append(s.cuts, cutPiece{msg: r.msg, off: r.off + most, n: r.n - most})
	r.msg.cut++
	s.unsent += uint64(r.n - most)
	r.n = most
	s.stats.Recuts++
}

// cutWaiting reports whether a piece recut left waits for a DSN. It
// drops the pieces of messages that failed meanwhile.
func (s *sender) cutWaiting() bool {
	for s.cutsHead < len(s.cuts) && s.cuts[s.cutsHead].msg.done {
		s.unsent -= uint64(s.cuts[s.cutsHead].n)
		s.popCut()
	}
	return s.cutsHead < len(s.cuts)
}

// newCutDSN gives the next packet of the oldest piece recut left a DSN,
// as newDSN does for a message's next bytes. One must wait (cutWaiting).
func (s *sender) newCutDSN() *dsnRecord {
	c := &s.cuts[s.cutsHead]
	if s.nextDSN-s.una == uint32(len(s.ring)) {
		s.growRing()
	}
	d := s.nextDSN
	s.nextDSN++
	n := min(s.payloadMax(c.msg.typ), c.n)
	r := &s.ring[d&s.mask]
	*r = dsnRecord{msg: c.msg, off: c.off, n: n}
	c.msg.unacked++
	s.unsent -= uint64(n)
	c.off += n
	c.n -= n
	if c.n == 0 {
		s.popCut()
	}
	return r
}

// popCut drops the oldest piece.
func (s *sender) popCut() {
	c := &s.cuts[s.cutsHead]
	c.msg.cut--
	*c = cutPiece{}
	s.cutsHead++
	if s.cutsHead == len(s.cuts) {
		s.cuts, s.cutsHead = s.cuts[:0], 0
	}
}
