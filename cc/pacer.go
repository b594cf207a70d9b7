package cc

import (
	"math"
	"time"
)

// Pacer spaces packets at a rate in bytes per second. Time is integer
// nanoseconds of the caller's clock.
type Pacer struct {
	next int64 // when the next packet may go
}

// Ready reports whether a packet may go at now, and if not, when.
func (p *Pacer) Ready(now int64) (bool, int64) {
	if now >= p.next {
		return true, now
	}
	return false, p.next
}

// Sent accounts for bytes sent at now at rate (bytes/s; +Inf or <= 0 means
// unpaced).
func (p *Pacer) Sent(now int64, bytes int, rate float64) {
	if rate <= 0 || math.IsInf(rate, 1) {
		p.next = now
		return
	}
	gap := int64(float64(bytes) / rate * float64(time.Second))
	// A sender that fell idle does not bank the time it did not use.
	p.next = max(p.next, now) + gap
}

// Rate is a sender's rate: the sum over its paths of window bytes per
// smoothed RTT, capped by the receiver's hint (bytes/s; +Inf for none).
// Paths without an RTT sample do not count; with none at all the rate is
// +Inf (the windows alone hold the sender back).
func Rate(windowBytes []float64, srtt []time.Duration, hint float64) float64 {
	r, sampled := 0.0, false
	for i, w := range windowBytes {
		if srtt[i] > 0 {
			r += w / srtt[i].Seconds()
			sampled = true
		}
	}
	if !sampled {
		r = math.Inf(1)
	}
	return math.Min(r, hint)
}
