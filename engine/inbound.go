// The receiver's queue. Its rate hints share all of its inbound capacity
// while its data packets arrive clean, and hold some back while they
// arrive CE-marked, so that a queue at its link drains (spec section 5.5,
// docs/cc.md "The receiver: max-min fair shares of its inbound capacity").

package engine

import "math"

const (
	// inboundMarkGain is the weight of one data packet in the share of
	// arrivals that are CE-marked: the share follows the last few hundred,
	// so that a queue standing for many round trips holds the hints back,
	// and a burst of marks, from a burst of resends or the start of a
	// sender, barely moves them.
	inboundMarkGain = 1.0 / 512
	// inboundHoldMost is the share of the inbound capacity the hints hold
	// back while every arrival is marked. What is held back drains the
	// queue that marks them: the first windows of an incast, which arrive
	// before any hint, or what senders sent above their hints.
	inboundHoldMost = 0.05
	// inboundHoldStep is the least change of the hold that recomputes the
	// shares, so that the share of marks moving packet by packet does not
	// recompute them at every arrival.
	inboundHoldStep = 0.005
)

// inboundMarks follows, plane by plane, how many of an endpoint's arriving
// data packets are CE-marked, and the share of its capacity its hints hold
// back for that.
type inboundMarks struct {
	marked []float64 // each plane's moving share of arrivals marked, 0 to 1
	hold   float64   // the share of the capacity the allocation holds back
}

// note takes one data packet arriving on plane. It reports whether the
// hold moved by inboundHoldStep or more, or to none.
//
// The hold follows the plane marked most. A sender spreads its hint over
// the planes by their ports' rates, so a queue on one plane drains only
// when the whole hint falls; and a plane whose queue marks all its
// arrivals would hold back little of the whole if the planes' shares were
// averaged.
func (m *inboundMarks) note(plane int, ce bool) bool {
	if plane >= len(m.marked) {
		m.marked = append(m.marked, make([]float64, plane+1-len(m.marked))...)
	}
	sample := 0.0
	if ce {
		sample = 1
	}
	m.marked[plane] += (sample - m.marked[plane]) * inboundMarkGain
	most := 0.0
	for _, v := range m.marked {
		most = max(most, v)
	}
	hold := inboundHoldMost * most
	if hold < inboundHoldStep/2 {
		hold = 0 // the queue is gone: hand out all of the capacity
	}
	if hold == m.hold || hold != 0 && math.Abs(hold-m.hold) < inboundHoldStep {
		return false
	}
	m.hold = hold
	return true
}

// inboundArrival notes a data packet's arrival on plane, marked or not,
// for the hold of the rate hints.
func (e *Endpoint) inboundArrival(plane int, ce bool) {
	if e.marks.note(plane, ce) && e.alloc != nil {
		e.alloc.SetCapacity(e.inboundCapacity())
	}
}
