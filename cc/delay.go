package cc

import (
	"math"
	"time"
)

// DelayParams are the delay signal's parameters. It stands in for ECN where
// a queue does not mark: a drop-tail bottleneck that only loss would
// reveal, and loss is not congestion here. Its input is a path's queueing
// delay on the way to the receiver, one sample per ACK record, and a round
// acts on its least sample, so that a delay only counts when every packet
// of the round met it.
type DelayParams struct {
	// Target is the queueing delay a path may show before its window is
	// cut. The target is never below the path's least RTT and the host's
	// scheduling delay (OnDelay), and it grows as the window falls
	// (target). Zero turns the signal off.
	Target time.Duration
	// Beta scales the cut: W x Beta x (queue over target) / RTT, Swift's
	// rule. MaxCut bounds one cut.
	Beta, MaxCut float64
	// HeldRounds is how many rounds in a row the queue may stay above one
	// and a half targets, cut every round, before the path takes the queue
	// for someone else's (see endRound).
	HeldRounds int
}

// DefaultDelay allows a queue of 25 µs or one least RTT, whichever is
// longer, before the window scaling (target). 25 µs is above the ECN
// thresholds of data-center switches, which mark queues of a few to about
// 16 µs.
var DefaultDelay = DelayParams{Target: 25 * time.Microsecond, Beta: 0.8, MaxCut: 0.5, HeldRounds: 16}

// delaySignal is a window's delay state.
type delaySignal struct {
	// The sample of the round with the least queue, and its RTT.
	queue, rtt time.Duration
	sampled    bool
	least      time.Duration // the target's floor: the path's least RTT and the host's scheduling delay

	held    int  // rounds in a row cut with the queue above 1.5 targets
	over    bool // the last round's queue was above the target: no additive increase
	foreign bool // the queue is taken to be held by senders that do not yield to delay
	seen    bool // a sample showed a queue above the target
}

// OnDelay gives the window one sample of its path: the queueing delay on
// the way to the receiver, the round trip it was taken in, and the least
// the target may be: the path's least round trip, and the host's
// scheduling delay, since a host that sends in bursts that late needs a
// queue that long to keep the bottleneck busy between them.
func (w *Window) OnDelay(queue, rtt, least time.Duration) {
	d := &w.delay
	if !d.sampled || queue < d.queue {
		d.queue, d.rtt, d.sampled = queue, rtt, true
	}
	d.least = least
	if w.p.Delay.Target > 0 && queue > w.target() {
		d.seen = true
	}
}

// QueueSeen reports whether any sample showed a queue above the target.
func (w *Window) QueueSeen() bool { return w.delay.seen }

// NoDelay drops the round's delay samples: the path's queues mark ECN, and
// marks are the finer signal.
func (w *Window) NoDelay() { w.delay.sampled, w.delay.over = false, false }

// endRound applies the delay signal at the end of a round and reports
// whether it cut the window. A round without a sample is left alone: where
// queues mark ECN, the caller gives none.
//
// A queue this path's cuts do not drain belongs to others. Senders that
// fill a drop-tail queue until it overflows (TCP's cubic and BBR) never
// leave it below the target, and a path that kept cutting would be left
// with nothing. After HeldRounds rounds in a row cut with the queue above
// one and a half targets the path stops cutting for delay, and starts
// again once a round's queue falls to the target. Senders that do yield
// hold their queue near one target, below the half more that ends the
// signal. This is the mode switch of delay-based schemes that share with
// loss-based ones (Copa's competitive mode).
func (w *Window) endRound() bool {
	d := &w.delay
	p := w.p.Delay
	queue, rtt, sampled := d.queue, d.rtt, d.sampled
	d.sampled = false
	d.over = false
	if p.Target <= 0 || !sampled {
		return false
	}
	target := w.target()
	switch {
	case queue <= target:
		d.held, d.foreign = 0, false
		return false
	case d.foreign:
		return false
	}
	d.over = true
	cut := min(p.MaxCut, p.Beta*float64(queue-target)/float64(max(rtt, queue)))
	w.w = max(w.min(), w.w*(1-cut))
	if 2*queue > 3*target {
		d.held++
	} else {
		d.held = 0
	}
	if d.held >= p.HeldRounds {
		d.foreign = true
	}
	return true
}

// DelayBase is the least one-way delay reading of a plane's paths, the
// base their queueing delay counts from. A reading is the receiver's clock
// at a packet's arrival less the sender's at its departure, modulo 2^32
// ns. The two clocks have any origins, so only differences of readings
// mean anything.
//
// The base is the least reading of the connection's life, not of a recent
// span. A queue that the senders hold near the target would otherwise
// become the base after a span, and the next target would come on top of
// it, span after span. The cost is clocks that drift apart: where the
// receiver's runs faster, the readings grow by the drift, tens of µs a
// second at tens of ppm, the signal takes that for a queue, and after
// HeldRounds the path yields and takes no delay signal until its delay
// falls back (endRound). Clocks that NTP disciplines drift far less.
type DelayBase struct {
	least uint32
	have  bool
}

// Queue takes in a reading and returns its delay over the base, the
// reading included.
func (b *DelayBase) Queue(reading uint32) time.Duration {
	if !b.have || int32(reading-b.least) < 0 {
		b.least, b.have = reading, true
	}
	return time.Duration(int32(reading - b.least))
}

// target is the queue the path may show: Target or the least RTT, the
// larger, and more as the window falls below 16 packets, up to twice as
// much at one packet or less. A small window is a small share of a queue
// that many paths cross: under a fixed target they would be cut for as
// long as they ran, and then yield (endRound). This is Swift's flow-based
// scaling of its target, by 1/sqrt(W), which stops at one packet.
func (w *Window) target() time.Duration {
	t := max(w.p.Delay.Target, w.delay.least)
	scale := max(0, 4/math.Sqrt(max(w.w, 1))-1) / 3
	return t + time.Duration(float64(t)*scale)
}
