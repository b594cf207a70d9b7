// The connection's random loss, and what it explains (docs/cc.md, "The
// sender's loss timers").

package engine

import "math"

// randomLoss is the share of the connection's transmissions lost on their
// way, as its ACK records' verdicts show them: a packet reported received,
// or one a gap below the record's newest PSN shows lost. Losses a timeout
// declares do not count, since a path that failed is not random loss. It
// is a moving average over about lossMemory verdicts. Beside it, the mean
// run of a path's PSNs lost in a row, over about lossMemory runs: near 1
// where losses are independent, longer where they come in bursts.
type randomLoss struct {
	rate     float64
	verdicts int     // verdicts taken, up to lossMemory
	run      float64 // the mean run of losses in a row
	runs     int     // runs taken, up to lossMemory
}

// add takes one ACK record's verdicts: acked packets received, lost ones
// lost to a gap, in runs runs of PSNs in a row.
func (l *randomLoss) add(acked, lost, runs int) {
	n := acked + lost
	if n == 0 {
		return
	}
	// The first verdicts are averaged evenly, later ones with the weight
	// of lossMemory, since verdicts stops there.
	w := float64(n) / float64(l.verdicts+n)
	l.rate += (float64(lost)/float64(n) - l.rate) * w
	l.verdicts = min(l.verdicts+n, lossMemory)
	if runs > 0 {
		w := float64(runs) / float64(l.runs+runs)
		l.run += (float64(lost)/float64(runs) - l.run) * w
		l.runs = min(l.runs+runs, lossMemory)
	}
}

// explains reports whether the connection's loss explains n transmissions
// in a row of which none brought news: each is lost on its way, or so is
// what answers it, which crosses the network the other way, at least
// lossExplains of the time. The first is silent at that rate; each next
// one at that rate, or, where losses come in runs, as often as a run goes
// on: 1 - 1/run, where runs end at random (a burst of a Gilbert-Elliott
// channel), once lossVerdicts runs were seen. Independent losses make runs
// of about 1/(1 - rate), which go on at the rate itself, less than the
// silence's: they explain no more than before. Before lossVerdicts
// verdicts nothing is explained.
func (l *randomLoss) explains(n int) bool {
	if l.verdicts < lossVerdicts {
		return false
	}
	if n <= 0 {
		return true
	}
	silent := 1 - (1-l.rate)*(1-l.rate) // a transmission or its answer lost
	next := silent
	if l.runs >= lossVerdicts && l.run > 1 {
		next = max(next, 1-1/l.run)
	}
	return silent*math.Pow(next, float64(n-1)) >= lossExplains
}

// atRandom reports whether the connection's ACK records show at least
// tailLossRate of its transmissions lost, a queue's overflows among them,
// once lossVerdicts verdicts are in: then a packet that a later one on
// another path overtook at the tail is taken for lost before its path
// probes (lostAtTail).
func (l *randomLoss) atRandom() bool {
	return l.verdicts >= lossVerdicts && l.rate >= tailLossRate
}

// tailCopies is how many copies go with a tail probe, a
// resend at the tail, or the DSN holding a full window, where nothing new
// follows that would show its loss:
// the fewest, at least one, that make losing every transmission of the DSN
// no likelier than tailMiss at the connection's rate of random loss, and
// at most maxTailCopies. Each round of loss found at the tail costs a
// round trip and a probe's margin, and the last of thousands of packets
// lost a third of the time needs several such rounds with one copy
// (docs/cc.md, "Copy of a probe or a resend"). Before lossVerdicts
// verdicts, one.
func (l *randomLoss) tailCopies() int {
	if l.verdicts < lossVerdicts {
		return 1
	}
	lost := l.rate // a copy and the original each lost at that rate
	for c := 1; c < maxTailCopies; c++ {
		if math.Pow(lost, float64(c+1)) <= tailMiss*(1+1e-9) { // 10% and one copy: 1%, whatever the rounding
			return c
		}
	}
	return maxTailCopies
}
