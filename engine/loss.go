// The connection's random loss, and what it explains (docs/cc.md, "The
// sender's loss timers").

package engine

import "math"

// randomLoss is the share of the connection's transmissions lost on their
// way, as its ACK records' verdicts show them: a packet reported received,
// or one a gap below the record's newest PSN shows lost. Losses a timeout
// declares do not count, since a path that failed is not random loss. It
// is a moving average over about lossMemory verdicts.
type randomLoss struct {
	rate     float64
	verdicts int // verdicts taken, up to lossMemory
}

// add takes one ACK record's verdicts: acked packets received, lost ones
// lost to a gap.
func (l *randomLoss) add(acked, lost int) {
	n := acked + lost
	if n == 0 {
		return
	}
	// The first verdicts are averaged evenly, later ones with the weight
	// of lossMemory, since verdicts stops there.
	w := float64(n) / float64(l.verdicts+n)
	l.rate += (float64(lost)/float64(n) - l.rate) * w
	l.verdicts = min(l.verdicts+n, lossMemory)
}

// explains reports whether random loss at the connection's rate explains n
// transmissions in a row of which none brought news: each is lost on its
// way, or so is what answers it, which crosses the network the other way,
// at least lossExplains of the time. Before lossVerdicts verdicts nothing
// is explained.
func (l *randomLoss) explains(n int) bool {
	if l.verdicts < lossVerdicts {
		return false
	}
	silent := 1 - (1-l.rate)*(1-l.rate) // a transmission or its answer lost
	return math.Pow(silent, float64(n)) >= lossExplains
}
