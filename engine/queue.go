// The queue a connection keeps in the fabric, and the hold it puts on its
// windows' growth (docs/cc.md, "Hold while the connection's own queue
// stands").

package engine

// queuedShare is the share of p's packets in flight that wait in queues
// rather than travel: a packet spends the least RTT moving and the rest of
// the smoothed RTT waiting.
func (p *sendPath) queuedShare() float64 {
	if p.RTT.Samples == 0 || p.RTT.SRTT <= 0 {
		return 0
	}
	return max(0, 1-float64(p.RTT.Min)/float64(p.RTT.SRTT))
}

// queueNow measures the connection's own queue: the packets each sampled
// path in use has in flight times its queued share, summed. It reports
// the average queued share of those paths, and whether the queue is high:
// more than half of what the receiver's hint keeps in flight over the
// least RTT, a BDP, on a connection whose sampled paths in use number more
// than a quarter of that BDP, as their additive increase adds that much to
// the windows every round trip. It is measured afresh for each ACK record,
// since the records before it in an ACK moved packets out of flight.
func (s *sender) queueNow() (share float64, high bool) {
	if !s.hinted() {
		return 0, false
	}
	least, _ := s.leastRTTs()
	if least <= 0 {
		return 0, false
	}
	var queued float64
	n := 0
	for _, p := range s.paths {
		if p.InUse() && p.RTT.Samples > 0 {
			q := p.queuedShare()
			queued += float64(p.inflight) * q
			share += q
			n++
		}
	}
	bdp := s.hint * least.Seconds() / s.mss
	if n == 0 || queued <= bdp/2 || float64(n) <= bdp/4 {
		return 0, false
	}
	return share / float64(n), true
}

// holdOff turns holdsGrowth off, for the tests that measure it.
var holdOff bool

// holdsGrowth reports whether p's additive increase waits. A connection of
// many paths grows by a packet a round trip on each, and where a mark on a
// window of a few packets is rare, the windows come to sum to several BDPs
// that stand in the fabric's queues and make its last packets late. So
// once the connection keeps more than half a BDP of its own packets queued
// and its paths add more than a quarter of a BDP a round trip, its paths
// whose routes queue at least as much as its average path's stop growing,
// and the clearer paths grow on, which moves its load to the routes with
// room. Growth by grant goes on: it runs only while the windows carry less
// than the hint. On a plane none of whose queues marks, the delay signal
// bounds the queue (cc.DelayParams) once it has seen one above its target
// on the path, and the hold gives way to it. A receiver that grants
// less than half of the sender's ports is the bottleneck (receiverBound),
// and its hints answer the queue at its link. A connection of few paths
// grows slowly against its BDP; held, it lost more under burst loss and
// after a plane failed than it gained (docs/cc.md).
func (p *sendPath) holdsGrowth() bool {
	s := p.s
	mine := p.queuedShare()
	if holdOff || mine == 0 || !s.c.ep.marking[p.Plane()] && p.cwin.QueueSeen() {
		return false // a path that queues nothing is never held
	}
	share, high := s.queueNow()
	return high && mine >= share && !s.receiverBound()
}
