// Timers: a path's probe and retransmission timer, the connection's ACK
// and no-progress timers.

package engine

import (
	"math"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
)

// armTimer sets the path's timer from now: a tail probe (timeout: once the
// path has an RTT sample), then the retransmission timeout, doubled per
// consecutive timeout. A path in ASSUMED_BAD is probed at its timeout.
// probeOverdue may bring the timer forward.
func (p *sendPath) armTimer(now clock.Time) {
	if p.inflight == 0 && p.State() != pathmgr.AssumedBad {
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

func (p *sendPath) onTimer() {
	c := p.s.c
	if c.state != Established {
		return
	}
	now := c.ep.clock.Now()
	if c.ep.tracer != nil {
		c.trace(TraceEvent{Kind: TraceTimer, Path: int(p.ID()), From: p.State(), To: p.State()})
	}
	if !c.tp.expired(p, now) {
		return
	}
	p.armTimer(now)
	p.s.pump()
	c.ep.flush()
}

// expired is multipath's handling of the path's timer: packets another
// transmission delivered are settled first; then an ASSUMED_BAD path whose
// probe went unanswered moves to a new source port and probes again, and a
// path with packets in flight sends a tail probe, or after one, declares
// its packets lost.
func (p *sendPath) expired(now clock.Time) bool {
	if p.State() != pathmgr.Down {
		p.settleMoot()
	}
	switch {
	case p.State() == pathmgr.Down:
		return false
	case p.State() == pathmgr.AssumedBad:
		// The route may be what failed.
		p.repath(now)
		p.sendProbe()
		p.timeouts = min(p.timeouts, 15) + 1 // at most 16 (and a count of 255 does not wrap)
	case p.inflight == 0:
		return false
	case !p.probed && p.RTT.Samples > 0:
		p.tailProbe()
	default:
		p.onRTO()
	}
	return true
}

// timeout is how long the path's timer waits from now (transport.timeout).
func (p *sendPath) timeout() time.Duration { return p.s.c.tp.timeout(p) }

// probeTimeout is multipath's timeout: a tail probe once the path has an
// RTT sample, the probing interval of an ASSUMED_BAD path, else the
// retransmission timeout.
func (p *sendPath) probeTimeout() time.Duration {
	if !p.probed && p.RTT.Samples > 0 && (p.State() == pathmgr.Good || p.State() == pathmgr.Skip) {
		cfg := &p.s.c.ep.cfg
		floor := cfg.RTOMin
		if p.s.hinted() {
			// The drain time keeps the probe behind the queue the packets
			// wait in; without a hint nothing does, and the timeout's
			// floor stands (a floor of ProbeMin resent packets that were
			// only late in an incast without hints).
			floor = cfg.ProbeMin
		}
		return min(max(2*p.RTT.SRTT+cfg.AckDelay, p.RTT.SRTT+p.s.drainTime()+cfg.AckDelay, floor), cfg.RTOMax)
	}
	if p.State() == pathmgr.AssumedBad {
		// Probing: the wait doubles, but only so far: what failed may be
		// repaired, and it is a small packet per path.
		return min(p.rto(), max(p.s.c.ep.cfg.BadProbeMax, p.rtoAfter(0)))
	}
	return p.rto()
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
func (p *sendPath) rtoAfter(timeouts int) time.Duration { return p.s.c.tp.rto(p, timeouts) }

// adaptiveRTO is multipath's retransmission timeout after timeouts in a
// row: from the path's RTT, or its connection's slowest sampled path's
// (doubled) when it has none yet and the receiver granted a rate, never
// before the packets in flight could drain, doubled per timeout.
func (p *sendPath) adaptiveRTO(timeouts int) time.Duration {
	cfg := &p.s.c.ep.cfg
	rtt := p.RTT
	if rtt.Samples == 0 && p.s.hinted() {
		rtt = p.s.slowestRTT()
	}
	rto := rtt.RTO(cfg.RTOInitial, cfg.RTOMin, cfg.RTOMax)
	rto = max(rto, rtt.SRTT+p.s.drainTime())
	if p.RTT.Samples == 0 && rtt.Samples > 0 {
		rto *= 2
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
		if p.RTT.Samples > 0 && (r.Samples == 0 || p.RTT.SRTT > r.SRTT) {
			r = p.RTT
		}
	}
	return r
}

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

func (c *Conn) onAckTimer() {
	if c.state != Established {
		return
	}
	if c.rcv.repeat {
		c.rcv.repeatAck()
	} else {
		c.rcv.ackNow()
	}
	c.ep.flush()
}

// madeProgress keeps the no-progress clock: it runs only while work is
// outstanding, and restarts only when the peer acknowledged something new
// (posting more work to a vanished peer must not keep it alive).
func (c *Conn) madeProgress(acked bool) {
	switch {
	case !c.snd.busy():
		c.progress.Stop()
	case acked || c.progress.Deadline() == clock.Never:
		c.progress.Reset(c.ep.clock.Now().Add(c.ep.cfg.NoProgress))
	}
}

func (c *Conn) onNoProgress() {
	if c.state == Closed || !c.snd.busy() {
		return
	}
	c.fail(ErrTimeout, StatusTimeout, true)
	c.ep.flush()
}
