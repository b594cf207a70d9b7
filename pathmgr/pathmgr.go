// Package pathmgr manages the paths of a connection. It keeps each path's
// state machine of GOOD, SKIP, ASSUMED_BAD and DOWN from docs/spec.md
// section 6.4, and its repathing to new source ports with epochs from
// section 6.3. It also keeps each path's probes, round-trip time, loss
// measurement and counters, and the telemetry snapshot the CLI and
// metrics show. The engine owns one Path per path, tells it what happened
// and acts on what it says. Nothing here does I/O or reads a clock.
package pathmgr

import (
	"fmt"
	"time"
)

// State is a path's state.
type State uint8

const (
	Good       State = iota // carries new data
	Skip                    // saw a CE mark, so new data prefers other paths for a while
	AssumedBad              // timed out, so it gets no new data and is probed until it answers
	Down                    // its plane is down
)

func (s State) String() string {
	switch s {
	case Good:
		return "GOOD"
	case Skip:
		return "SKIP"
	case AssumedBad:
		return "ASSUMED_BAD"
	case Down:
		return "DOWN"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// RTT estimates a path's round-trip time from samples, as TCP does by RFC
// 6298. It keeps the smoothed RTT with gain 1/8, the mean deviation with
// gain 1/4, and the minimum ever seen.
type RTT struct {
	SRTT, RTTVar, Min time.Duration
	Samples           uint64
}

// Update adds one sample.
func (r *RTT) Update(sample time.Duration) {
	if sample <= 0 {
		sample = 1
	}
	if r.Samples == 0 {
		r.SRTT, r.RTTVar, r.Min = sample, sample/2, sample
	} else {
		d := r.SRTT - sample
		if d < 0 {
			d = -d
		}
		r.RTTVar += (d - r.RTTVar) / 4
		r.SRTT += (sample - r.SRTT) / 8
		r.Min = min(r.Min, sample)
	}
	r.Samples++
}

// RTO is the retransmission timeout, SRTT + 4 RTTVar clamped between
// floor and ceiling. Before the first sample it is initial.
func (r *RTT) RTO(initial, floor, ceiling time.Duration) time.Duration {
	if r.Samples == 0 {
		return initial
	}
	return min(max(r.SRTT+4*r.RTTVar, floor), ceiling)
}

// Counters are a path's lifetime counts on the sending side.
type Counters struct {
	PacketsSent, BytesSent uint64 // every transmission, retransmissions included
	Retransmits            uint64 // transmissions of content sent before
	Lost                   uint64 // transmissions declared lost by a gap or a timeout
	LocalDrops             uint64 // transmissions the local host dropped on their way out, its queue full; not in Lost
	Timeouts               uint64 // retransmission timeouts
	SpuriousTimeouts       uint64 // the Timeouts whose packets an ACK later reported received
	CEMarks                uint64 // CE marks the peer reported for this path
	DelayCuts              uint64 // window cuts for a queue above the delay target (docs/cc.md)
	Acked                  uint64 // transmissions reported received
	Repaths                uint64 // moves to a new source port, PlaneMoves included
	PlaneMoves             uint64 // repaths onto another plane: off a failed one, or back to the path's own
	TailProbes             uint64 // the Retransmits that resent a path's newest unresolved packet as a tail probe; a probe of new data is not one
	Copies                 uint64 // the Retransmits that sent a probe or a resend a second time, here, on another plane than the first
}

// Telemetry is a read-only snapshot of one path.
type Telemetry struct {
	Path     int
	Plane    int
	SrcPort  uint16
	Epoch    uint8
	State    State
	RTT      RTT
	InFlight int
	Window   int
	Counters
}

// Utilization is how much of its congestion window the path holds in
// flight now. Near 1, the window is what limits it. Well under 1, the
// pacer or the receiver's hint does, or it has little to send.
func (t Telemetry) Utilization() float64 {
	if t.Window <= 0 {
		return 0
	}
	return float64(t.InFlight) / float64(t.Window)
}

// ECNFraction is the share of acknowledged transmissions that were CE-marked.
func (t Telemetry) ECNFraction() float64 {
	if t.Acked == 0 {
		return 0
	}
	return float64(t.CEMarks) / float64(t.Acked)
}
