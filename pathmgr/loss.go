package pathmgr

// A path measures its own loss over rounds of lossRound resolved packets,
// as its ACK records report them. Losses a timeout or a failed plane
// declares are not the route's loss rate and are not counted.
const lossRound = 64

// lossFloor is the smoothed loss below which no path stands out. Random
// loss at that level is left to selective repeat.
const lossFloor = 0.02

// lossMeter is a path's loss measurement. It holds this round's counts
// and the rounds' smoothed loss fraction, which is -1 before the first
// round.
type lossMeter struct {
	acked, lost int
	avg         float64
}

// CountLoss adds the verdicts of one ACK record on the path's packets. It
// reports whether a round ended, so that the average changed.
func (p *Path) CountLoss(acked, lost int) bool {
	m := &p.loss
	m.acked += acked
	m.lost += lost
	if m.acked+m.lost < lossRound {
		return false
	}
	f := float64(m.lost) / float64(m.acked+m.lost)
	m.acked, m.lost = 0, 0
	if m.avg < 0 {
		m.avg = f
	} else {
		m.avg += (f - m.avg) / 4
	}
	return true
}

// LossAverage is the path's smoothed loss fraction, or -1 before its
// first round.
func (p *Path) LossAverage() float64 { return p.loss.avg }

// LossOutlier reports whether the path's loss stands out from others, the
// mean loss of the connection's other measured paths. It stands out when
// it is above lossFloor and more than factor times others. Loss that hits
// every path alike is not a route's fault. A route through a bad link
// shows in its path's own sequence, and a new source port may avoid it,
// by spec section 6.3.
func (p *Path) LossOutlier(others, factor float64) bool {
	return p.loss.avg > lossFloor && p.loss.avg > factor*others
}

// RestartLoss sets the path's smoothed loss to avg, so that a path on a
// new route starts from its connection's average.
func (p *Path) RestartLoss(avg float64) { p.loss.avg = avg }
