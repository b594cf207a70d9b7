// Package cc is mroce's congestion control, at both ends of a connection.
// Its types are pure objects driven by signals and the time they are given.
// They do no I/O and keep no clock of their own.
//
//   - Window is a path's congestion window, a DCTCP-style AIMD driven by
//     ECN. The fraction of CE-marked packets is averaged once per round
//     trip. A mark cuts the window by half that average, at most once a
//     window of data, and every acknowledged packet grows it by 1/W, one
//     packet per round trip. A window may fall under one packet; the
//     path then sends a packet every round trip / W (Gap), and each
//     acknowledged packet grows it by an eighth. Random loss does not cut
//     it. A retransmission timeout cuts that path's window to one packet
//     at most. Where no queue marks, a round whose least one-way queueing
//     delay is above a target cuts the window too, in proportion to the
//     excess (DelayParams).
//   - Allocator is a receiver's max-min fair share of its inbound capacity
//     among the connections sending to it. Each connection declares its
//     backlog in its data packets, and every ACK carries the share as a rate
//     hint.
//   - Pacer spaces a sender's packets at its rate. That is the minimum of its
//     windows' rate, the sum of window / RTT over the paths, and the
//     receiver's hint.
//   - DCQCN is the rate controller of the RoCEv2 baseline mode, described in
//     section 10 of docs/spec.md.
//
// docs/cc.md gives every parameter, its default and the reason for it.
package cc

import (
	"time"

	"github.com/mroce/mroce/proto"
)

// WindowParams are a path window's parameters, in packets.
type WindowParams struct {
	Initial, Min, Max float64
	// G is the gain of the ECN fraction's moving average, DCTCP's g.
	G float64
	// Delay is the delay signal's parameters.
	Delay DelayParams
}

// DefaultWindow is DCTCP's published gain with a window that starts at 16
// packets and is held to [1/16, 255], and DefaultDelay. The maximum of 255
// fits the path's ring of 256 PSNs. The minimum is under one packet: a
// connection with more paths than its bandwidth-delay product holds
// packets would keep more than that product in flight with a packet a
// path, and marks would find nothing left to cut (Gap, docs/cc.md).
var DefaultWindow = WindowParams{Initial: 16, Min: 1.0 / 16, Max: 255, G: 1.0 / 16, Delay: DefaultDelay}

// subPacketGain is what a window under one packet grows by for each packet
// acknowledged without a mark. Such a path's ACKs come W a round trip, so
// it grows by an eighth of itself a round trip, as do its connection's
// windows together. A packet a round trip, additive increase's rule, would
// take it back over one packet at its next ACK.
const subPacketGain = 1.0 / 8

// Window is one path's congestion window, updated by every ACK record
// of the path.
type Window struct {
	w     float64 // packets
	alpha float64 // moving average of the fraction of packets marked CE

	acked, marked int32  // in the current round, a window's worth of at most hundreds
	roundEnd      uint32 // the round ends when this PSN is acknowledged
	afterCut      bool   // no mark cuts until an ACK record covers cutUntil
	cutUntil      uint32 // the path's next PSN when the window was last cut
	granted       bool   // the receiver grants more than the windows carry (Grant)
	held          bool   // additive increase waits (Hold)
	whole         bool   // the window stays at a packet or more (WholePackets)
	delay         delaySignal
	p             WindowParams
}

// NewWindow returns a window at p.Initial with alpha 1. That is DCTCP's
// start, where the first mark halves the window.
func NewWindow(p WindowParams, nextPSN uint32) *Window {
	return &Window{p: p, w: p.Initial, alpha: 1, roundEnd: nextPSN}
}

// Packets is the window in whole packets, at least 1.
func (w *Window) Packets() int { return max(1, int(w.w)) }

// Gap is how long after its last packet a path whose round trip is rtt
// may send its next, for a window under one packet: rtt / W, so that it
// carries W packets a round trip. It is 0 for a window of a packet or
// more, which Packets bounds.
func (w *Window) Gap(rtt time.Duration) time.Duration {
	if w.w >= 1 || w.w <= 0 {
		return 0 // 0 only where Min is 0: no gap to keep
	}
	return time.Duration(float64(rtt) / w.w)
}

// Value is the window, fractional.
func (w *Window) Value() float64 { return w.w }

// Alpha is the current average ECN fraction.
func (w *Window) Alpha() float64 { return w.alpha }

// OnAck applies one ACK record's news for the path. Of the acked packets
// newly reported received, marked carried CE. through is the highest PSN
// the record covers, and next is the path's next PSN. Together they delimit
// rounds of one round trip each, and the window of data after a cut. The
// record's delay sample goes to OnDelay first. OnAck reports whether the
// delay signal cut the window.
func (w *Window) OnAck(acked, marked int, through, next uint32) (delayCut bool) {
	w.acked += int32(acked)
	w.marked += int32(marked)
	if w.afterCut && proto.SeqLessEq(w.cutUntil, through) {
		w.afterCut = false
	}
	if marked > 0 && !w.afterCut {
		// A mark cuts by half the average fraction, at most once a window
		// of data (RFC 3168, section 6.1.2): the marks of packets sent
		// before a cut tell of the queue that cut answers. A round's end
		// does not clear it: a cut late in its round would cut again, too
		// soon, on the marks of packets sent before it.
		w.w = max(w.min(), w.w*(1-w.alpha/2))
		w.cutUntil, w.afterCut = next, true
	} else if marked == 0 && w.w > 0 && !w.delay.over && (!w.held || w.granted) {
		// Additive increase adds one packet per window of acknowledgments,
		// unless the last round showed a queue above the delay target or
		// the sender holds it (Hold).
		// Where the receiver grants more than the windows carry, a packet
		// per packet acknowledged: the window doubles in a round trip.
		grow := float64(acked) / w.w
		if w.w < 1 {
			grow = float64(acked) * subPacketGain
		}
		if w.granted {
			grow = float64(acked)
		}
		w.w = min(w.p.Max, w.w+grow)
	}
	if proto.SeqLessEq(w.roundEnd, through) {
		if w.acked > 0 {
			// Marks can outnumber acknowledgments in a round, because a
			// duplicate or a refused packet is marked too. The fraction is
			// at most 1.
			f := min(1, float64(w.marked)/float64(w.acked))
			w.alpha = (1-w.p.G)*w.alpha + w.p.G*f
		}
		delayCut = w.endRound()
		w.acked, w.marked = 0, 0
		w.roundEnd = next
	}
	return delayCut
}

// Grant says whether the window may grow by a packet for each packet
// acknowledged without a mark, not by 1/W: the window doubles in a round
// trip. The sender grants it while the receiver's rate hint is above what
// its windows carry, on a plane whose queues mark, after the hint rose, to
// a clear path whose siblings' routes queue, or to a path whose route
// cleared (docs/cc.md). A share that rises, as when other senders finish,
// that marked paths gave up, or that other traffic left, is then taken in
// a few round trips, where additive increase would take hundreds at 400
// Gb/s and 12.5 µs. The first mark ends it, as it ends additive increase.
func (w *Window) Grant(more bool) { w.granted = more }

// Hold says whether additive increase waits, while the sender's
// connection keeps more of its packets queued than it needs and this
// path's route queues at least as much as its average path's (docs/cc.md).
// Growth by grant does not wait, and a mark still cuts.
func (w *Window) Hold(held bool) { w.held = held }

// WholePackets says whether the window stays at a packet or more, above a
// Min under one: raised to one packet, and cut no lower. The sender holds
// it there where its NIC's rate is not known, or its receiver sends no
// hints or grants under half of that rate (docs/cc.md, "Windows under one
// packet").
func (w *Window) WholePackets(on bool) {
	w.whole = on
	if on {
		w.w = max(w.w, 1)
	}
}

// min is the least the window may be cut to.
func (w *Window) min() float64 {
	if w.whole {
		return max(w.p.Min, 1)
	}
	return w.p.Min
}

// OnTimeout trims the window to one packet, or its minimum where that is
// more, after the path timed out; a window already under that stays. Other
// paths are not touched, and random loss, a gap, never calls this.
func (w *Window) OnTimeout() { w.w = min(w.w, max(1, w.p.Min)) }

// Raise sets the window to v where that is larger, up to Max. It puts back
// the window a timeout cut once an ACK shows the timeout spurious (a window
// that grew again since keeps the larger value), and it lifts the windows
// to a bandwidth-delay product at a connection's start.
func (w *Window) Raise(v float64) { w.w = max(w.w, min(v, w.p.Max)) }
