package cc

import (
	"math"
	"time"
)

// Pacer spaces packets at a rate in bytes per second. Time is integer
// nanoseconds of the caller's clock.
type Pacer struct {
	next      int64 // when the next packet may go
	last      int64 // when the last packet went
	lastBytes int
	late      bool // making up for a late wake (see Late)
}

// Ready reports whether a packet may go at now, and if not, when.
func (p *Pacer) Ready(now int64) (bool, int64) {
	if now >= p.next {
		return true, now
	}
	return false, p.next
}

// Sent accounts for bytes sent at now at rate, in bytes per second. A rate
// of +Inf or <= 0 means unpaced.
func (p *Pacer) Sent(now int64, bytes int, rate float64) {
	if rate <= 0 || math.IsInf(rate, 1) {
		p.next = now
		return
	}
	gap := int64(float64(bytes) / rate * float64(time.Second))
	if p.late && p.next < now {
		p.next += gap // owed since a late wake
	} else {
		// A sender that fell idle does not bank the time it did not use.
		p.late = false
		p.next = max(p.next, now) + gap
	}
	p.last, p.lastBytes = now, bytes
}

// Late tells the pacer that a sender that waited for it runs at now, later
// than the time the pacer gave. The host ran it late; the sender was not
// idle. So the packets it would have sent meanwhile may go back to back,
// up to limit's worth of them, until the pacer holds one back or OnTime is
// called. An event loop's timer always fires a little late, and without
// this every wake would lose its lateness from the rate.
func (p *Pacer) Late(now int64, limit time.Duration) {
	if p.next < now {
		p.next = max(p.next, now-int64(limit))
		p.late = true
	}
}

// OnTime ends the making up that Late began. The sender calls it when the
// sends of its late wake are done: later sends are paced from their time.
func (p *Pacer) OnTime() { p.late = false }

// Faster tells the pacer the rate rose to rate. The wait after the last
// packet shrinks to what the new rate asks, so a gap taken at a low rate
// does not hold the sender back.
func (p *Pacer) Faster(rate float64) {
	if rate <= 0 {
		return
	}
	if math.IsInf(rate, 1) {
		p.next = min(p.next, p.last)
		return
	}
	p.next = min(p.next, p.last+int64(float64(p.lastBytes)/rate*float64(time.Second)))
}

// PacingGain is how much faster than its windows' rate a sender paces. The
// windows decide how much is in flight. Pacing only spaces it and must not
// hold the sender below what its windows allow. Linux paces at 1.2 × in
// congestion avoidance for the same reason.
const PacingGain = 1.25

// Rate is a sender's pacing rate, PacingGain times its windows' rate from
// WindowRate. The receiver's hint in bytes per second caps it, and +Inf
// means no hint. The hint is a rate to keep, not to exceed.
func Rate(windowRate, hint float64) float64 { return math.Min(PacingGain*windowRate, hint) }

// PathRate is what one path gives a sender's windows' rate. That is its
// window in bytes and its minimum RTT, or 0 before the first sample.
type PathRate struct {
	WindowBytes float64
	MinRTT      time.Duration
}

// WindowRate is the rate a sender's windows deliver, the sum over its paths
// of window bytes per RTT. A path without an RTT sample yet counts at the
// fastest sampled path's RTT, since the paths of a connection join the same
// two hosts. Counted as nothing, it would hold the sender to the rate of
// the paths its first ACKs happened to come back on, in the round trips
// when every path's window is still open. With no sample at all the rate is
// +Inf, and the windows alone hold the sender back.
//
// The RTT to give is each path's minimum: a smoothed RTT lags behind a
// queue that drains, and pacing by it would slow the sender just when the
// path clears.
func WindowRate(paths []PathRate) float64 {
	var fastest time.Duration
	for _, p := range paths {
		if t := p.MinRTT; t > 0 && (fastest == 0 || t < fastest) {
			fastest = t
		}
	}
	if fastest == 0 {
		return math.Inf(1)
	}
	r := 0.0
	for _, p := range paths {
		t := p.MinRTT
		if t == 0 {
			t = fastest
		}
		r += p.WindowBytes / t.Seconds()
	}
	return r
}
