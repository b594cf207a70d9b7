// Receive credits (spec section 6.5, capability CREDITS). Each ACK names
// one stream and its limit, the RSN after the last receive posted on it.
// The data sender starts no SEND or WRITE_IMM beyond its stream's limit,
// so a refusal for a missing receive (RNR) becomes the exception.

package engine

import (
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/proto"
)

// maxCreditAhead is how far past a stream's oldest receive a named limit
// may reach, so that the sender's 16-bit serial comparison holds.
const maxCreditAhead = 1<<15 - 1

// limit is the stream's receive limit: every RSN before it has a receive.
func (st *recvStream) limit() uint32 {
	return st.base + min(uint32(len(st.recvs)-st.head), maxCreditAhead)
}

// credit is the stream and limit the next ACK names (spec section 6.5): a
// stream whose limit grew since it was last named, round robin from the
// last one named; else a stream the sender may wait on, round robin too,
// so that a name an ACK lost is named again; else the stream of the
// latest SEND or WRITE_IMM. A connection without credits, or one whose
// receives come from a shared queue, names none.
func (r *receiver) credit() (uint8, uint16) {
	if !r.c.credits || r.srq != nil {
		return proto.NoCreditStream, 0
	}
	n := min(len(r.streams), proto.NoCreditStream) // streams 0 .. 254 may be named
	k := roundRobin(r.grown, r.lastNamed, n)
	if k < 0 {
		k = roundRobin(r.awaited, r.lastNamed, n)
	}
	if k < 0 && r.lastSend < n {
		k = r.lastSend
	}
	if k < 0 {
		return proto.NoCreditStream, 0
	}
	r.grown.clear(k)
	r.awaited.set(k)
	r.lastNamed = k
	return uint8(k), uint16(r.streams[k].limit())
}

// roundRobin is the first member of set in [0, n) after last, wrapping, or
// -1.
func roundRobin(set bitset, last, n int) int {
	if k := set.next(last+1, n); k >= 0 {
		return k
	}
	return set.next(0, n)
}

// posted follows a receive posted on stream k. Its limit grew, so the next
// ACK names it. If the sender was told a limit for it before, or was
// refused a SEND on it, it may be waiting for this receive: an ACK goes
// within the ACK delay, with data to acknowledge or not.
func (r *receiver) posted(k int) {
	c := r.c
	if !c.credits || k >= proto.NoCreditStream {
		return
	}
	r.grown.set(k)
	if r.awaited.next(k, k+1) != k || c.state != Established {
		return
	}
	if at := c.ep.clock.Now().Add(c.ep.cfg.AckDelay); c.ackTimer.Deadline() > at {
		c.ackTimer.Reset(at) // also when it waits to repeat the last ACK, later
	}
}

// takeCredit applies the stream and limit an ACK names. The first limit
// named for a stream replaces the 1 it started with; after it, a limit
// only moves forward, since an older ACK that comes late names an older
// one. An ACK that names no stream lifts the first limit of every stream
// not named yet: the receiver has no credits to give, its receives coming
// from a shared queue. A stream beyond the connection's is a bad ACK,
// counted.
func (s *sender) takeCredit(stream uint8, limit uint16) {
	if stream == proto.NoCreditStream {
		for k := range s.c.streams {
			if st := &s.streams[k]; st.limited && !st.named {
				st.limited = false
				s.release(k)
			}
		}
		return
	}
	if int(stream) >= s.c.streams {
		s.stats.BadAcks++
		return
	}
	st := &s.streams[stream]
	if !st.named || seqLess16(st.limit, limit) {
		st.named, st.limited, st.limit = true, true, limit
		s.release(int(stream))
		s.creditWaits = 0
		if st.probing {
			s.retryRefusedNow(st) // its refused message may have a receive now
		}
	}
}

// release marks stream k ready to send, no longer held for credit. The
// credit wait stops once no stream is held.
func (s *sender) release(k int) {
	s.ready.set(k)
	s.held.clear(k)
	if s.creditT != nil && s.held.next(0, len(s.streams)) < 0 {
		s.creditT.Stop()
	}
}

// retryRefusedNow makes the refused DSN a stream probes with due now, if
// the stream's new limit covers its message. With credits a refusal waits
// for the limit, not for the RNR's back-off (onRefused).
func (s *sender) retryRefusedNow(st *sendStream) {
	r := s.record(st.probe)
	if r == nil || r.acked || !r.waiting || !seqLess16(uint16(r.msg.rsn), st.limit) {
		return
	}
	now := s.c.ep.clock.Now()
	r.retryAt = now
	if d := s.retry.Deadline(); d == clock.Never || now < d {
		s.retry.Reset(now)
	}
}

// heldByCredit reports whether message m, next on stream st, must wait for
// a receive: it is a SEND or WRITE_IMM whose RSN is not before the
// stream's limit, 1 until an ACK names the stream. The one packet the
// credit wait lets through goes (onCreditWait).
func (st *sendStream) heldByCredit(m *message) bool {
	return st.limited && (m.typ == proto.TypeSend || m.typ == proto.TypeWriteImm) &&
		!seqLess16(uint16(m.rsn), st.limit) && !(st.overdraw && m.rsn == st.overdrawRSN && m.next == st.overdrawAt)
}

// holdForCredit notes that stream k waits for receive credit. If nothing
// the connection has in flight brings an ACK for the wait's length, the
// credit wait lets the held messages go anyway. The wait runs while any
// stream is held.
func (s *sender) holdForCredit(k int) {
	s.ready.clear(k) // until an ACK names a further limit, or the credit wait ends
	s.held.set(k)
	if s.creditT == nil {
		s.creditT = s.c.ep.clock.NewTimer(s.onCreditWait)
	}
	if s.creditT.Deadline() == clock.Never {
		s.creditT.Reset(s.c.ep.clock.Now().Add(s.creditWait()))
	}
}

// creditWait is how long a sender held back by credits waits with nothing
// in flight before it sends anyway: its first path's retransmission
// timeout, doubled for each wait in a row that no new limit ended, up to
// RTOMax. An ACK naming the limit it waits for may have been lost; more
// likely the application has not posted its receives yet, and a send
// beyond them costs a refusal.
func (s *sender) creditWait() time.Duration {
	s.equip()
	return min(s.paths[0].rtoAfter(0)<<min(s.creditWaits, 16), s.c.ep.cfg.RTOMax)
}

// onCreditWait ends a credit wait. With packets in flight, their ACKs will
// name limits, so it waits again. Otherwise the next packet of the first
// held message of each stream goes, one packet: the receiver accepts it,
// and its ACK names a limit past the message, or refuses it with RNR, and
// the sender probes as it does without credits (spec sections 6.5 and 7).
// A SEND of hundreds of packets beyond the receives costs one refusal, not
// hundreds.
func (s *sender) onCreditWait() {
	c := s.c
	if c.state != Established {
		return
	}
	if s.inflight() > 0 {
		s.creditT.Reset(c.ep.clock.Now().Add(s.creditWait()))
		return
	}
	n := len(s.streams)
	for k := s.held.next(0, n); k >= 0; k = s.held.next(k+1, n) {
		st := &s.streams[k]
		if st.sendIdx < len(st.queue) && st.heldByCredit(st.queue[st.sendIdx]) {
			m := st.queue[st.sendIdx]
			st.overdraw, st.overdrawRSN, st.overdrawAt = true, m.rsn, m.next
			s.stats.CreditOverdraws++
		}
		s.held.clear(k)
		s.ready.set(k)
	}
	s.creditWaits++
	s.pump()
	c.ep.flush()
}

// seqLess16 is serial order on 16-bit numbers (spec section 2).
func seqLess16(a, b uint16) bool { return a != b && b-a < 1<<15 }
