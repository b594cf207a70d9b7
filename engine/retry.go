// Refused packets, their NACKs and their retries (spec section 7).

package engine

import (
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/proto"
)

// onNack handles a refused packet (spec section 7).
func (s *sender) onNack(pkt *proto.Packet) {
	s.equip() // a refusal names a DSN and a path, which must exist to be checked
	n := pkt.Nack()
	code := n.Code()
	r := s.record(n.DSN())
	if code != proto.NackSeqErr && (r == nil || r.acked || r.path != n.PathID() || r.psn != n.PSN()) {
		// A NACK names the transmission it refuses (spec section 7). One
		// that names none in flight is stale or forged and is not obeyed:
		// a fatal one would end the connection.
		s.stats.BadNacks++
		return
	}
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
	s.c.tp.refused(s, n, r)
}

// onRefused is multipath's handling of a retryable NACK (spec section 7).
// The refused transmission is resolved without counting it lost. Its DSN
// waits the receiver's RetryAfter, doubled for each refusal of the same
// content. A stream with a refused DSN sends no new data until the DSN is
// accepted (see sendStream.refused). SEQ_ERR belongs to the baseline and is
// ignored here.
func (s *sender) onRefused(n proto.NackHeader, r *dsnRecord) {
	code := n.Code()
	if code == proto.NackSeqErr {
		return
	}
	s.stats.Nacks++
	if int(n.PathID()) < len(s.paths) {
		p := s.paths[n.PathID()]
		if psn := n.PSN(); psn-p.oldest < p.next-p.oldest {
			if sr := p.slot(psn); !sr.resolved && sr.psn == psn && sr.dsn == n.DSN() {
				sr.resolved = true
				p.released(sr)
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
	// Back off. The wait is the receiver's RetryAfter, doubled for each
	// refusal of the same content, up to 64 times RetryAfter.
	wait := time.Duration(n.RetryAfter()) * time.Microsecond << min(r.refusals, 6)
	st := &s.streams[s.streamOf(r.msg)]
	if st.limited {
		// The receiver names its receives (spec section 6.5): the retry
		// waits for a limit past this message, and at most a credit wait.
		wait = max(wait, s.creditWait())
	}
	if r.refusals == 0 {
		st.refused++
	}
	r.refusals++
	r.retryAt = now.Add(wait)
	switch {
	case !st.probing:
		st.probing, st.probe = true, n.DSN()
	case proto.SeqLess(n.DSN(), st.probe):
		// The NACK of an older packet came after a later one's, by a slower
		// path. The older packet is the one to retry, because the
		// application posts its receive first. The later one waits.
		if old := s.record(st.probe); old != nil && !old.acked && old.waiting {
			old.retryAt = clock.Never
		}
		st.probe = n.DSN()
	case st.probe != n.DSN():
		r.retryAt = clock.Never // waits for the probe, see sendStream.refused
	}
	s.waiting = append(s.waiting, n.DSN())
	if r.retryAt != clock.Never && (s.retry.Deadline() == clock.Never || r.retryAt < s.retry.Deadline()) {
		s.retry.Reset(r.retryAt)
	}
	s.pump()
}

// releaseRefused makes the refused DSNs of stream that waited for its probe
// due now. The receiver accepted the probe, so it is ready again.
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
