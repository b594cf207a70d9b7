// The path state machine: states, repathing, probes and loss outliers
// (spec sections 6.3 and 6.4).

package engine

import (
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// setState changes the path's state and tells the application.
func (p *sendPath) setState(st pathmgr.State, repath bool) {
	from := p.state
	p.state = st
	p.rateChanged()
	c := p.s.c
	if o, ok := c.events.(PathObserver); ok && (from != st || repath) {
		o.PathChanged(c, PathEvent{Path: int(p.id), Plane: p.plane, From: from, To: st, Repath: repath,
			SrcPort: p.port, Epoch: p.epoch, At: c.ep.clock.Now()})
	}
}

// planeDown takes the path out of use with its plane: what it had in
// flight is resent on other paths.
func (p *sendPath) planeDown() {
	if p.s.c.isBaseline() {
		// One path, in order: nothing can go elsewhere. Wait for the plane;
		// go-back-N resends from the oldest unacknowledged when it returns.
		p.timer.Stop()
		p.setState(pathmgr.Down, false)
		return
	}
	for psn := p.oldest; psn != p.next; psn++ {
		if r := p.slot(psn); !r.resolved && r.psn == psn {
			p.resolveLost(r, psn)
		}
	}
	p.advance()
	p.timer.Stop()
	p.setState(pathmgr.Down, false)
}

// planeUp puts the path back on trial: it is probed and takes data again
// once a probe is answered.
func (p *sendPath) planeUp(now clock.Time) {
	p.timeouts = 0
	if p.s.c.isBaseline() {
		p.setState(pathmgr.Good, false)
		p.s.goBack(p.oldest)
		p.armTimer(now)
		return
	}
	p.setState(pathmgr.AssumedBad, false)
	p.sendProbe()
	p.armTimer(now)
}

// repath gives the path another source port from the pool; its epoch
// advances and its PSN space continues (spec section 6.3). A path moves at
// most once per MPL: it reports false, and stays, when it moved more
// recently.
func (p *sendPath) repath(now clock.Time) bool {
	cfg := &p.s.c.ep.cfg
	if p.ctr.Repaths > 0 && now.Sub(p.repathedAt) < cfg.MPL {
		return false
	}
	n := len(cfg.SourcePorts)
	next := (p.portIndex + len(p.s.paths)) % n
	if next == p.portIndex {
		next = (next + 1) % n // the pool is a multiple of the paths: step off
	}
	p.portIndex = next
	p.repathedAt = now
	p.port = cfg.SourcePorts[p.portIndex]
	p.epoch = (p.epoch + 1) & 3
	p.epochStart[p.epoch] = p.next
	p.ctr.Repaths++
	p.setState(p.state, true)
	return true
}

func (p *sendPath) sendProbe() {
	c := p.s.c
	if !c.knows(p.plane) {
		return
	}
	p.probeID++
	var pkt proto.Packet
	c.build(&pkt, proto.TypeProbe, 0, 0)
	pkt.Common.SetDstConnID(c.peerID)
	pkt.Common.SetPathID(p.id)
	pkt.Common.SetEpoch(p.epoch)
	pkt.Probe().SetProbeID(p.probeID)
	c.emit(&pkt, p.plane, p.port)
}

func (s *sender) onProbeReply(pkt *proto.Packet, at clock.Time) {
	s.equip() // a reply names a path: counted against it, or as bad, as always
	id := int(pkt.Common.PathID())
	if id >= len(s.paths) {
		s.stats.BadAcks++
		return
	}
	p := s.paths[id]
	r := pkt.ProbeReply()
	if r.ProbeID() != p.probeID || pkt.Common.Epoch() != p.epoch {
		return // an old probe's reply
	}
	if sample := uint32(at) - r.EchoTimestamp() - r.ServiceTime(); sample < 1<<31 {
		p.rttSample(time.Duration(sample))
	}
	if p.state == pathmgr.AssumedBad {
		p.setState(pathmgr.Good, false)
		p.timeouts = 0
		p.armTimer(at)
		s.pump()
	}
}

// lossRound is how many resolved packets of a path make one measurement of
// its loss.
const lossRound = 64

// checkLoss adds one ACK's verdicts on the path's packets to its loss
// measurement; at the end of a round of lossRound packets it moves the
// path to a new source port when its loss stands out: above 2% and
// LossOutlierFactor times the other paths' average. Random loss that hits
// every path alike changes nothing (loss is not congestion here); a route
// through a bad link is left, as its path's own sequence shows it (spec
// section 6.3).
func (p *sendPath) checkLoss(now clock.Time, acked, lost int) {
	p.roundAcked += acked
	p.roundLost += lost
	if p.roundAcked+p.roundLost < lossRound {
		return
	}
	f := float64(p.roundLost) / float64(p.roundAcked+p.roundLost)
	p.roundAcked, p.roundLost = 0, 0
	if p.lossAvg < 0 {
		p.lossAvg = f
	} else {
		p.lossAvg += (f - p.lossAvg) / 4
	}
	cfg := &p.s.c.ep.cfg
	if cfg.LossOutlierFactor < 0 || p.lossAvg <= 0.02 {
		return
	}
	others, n := 0.0, 0
	for _, q := range p.s.paths {
		if q != p && q.lossAvg >= 0 {
			others += q.lossAvg
			n++
		}
	}
	if n == 0 || p.lossAvg <= cfg.LossOutlierFactor*others/float64(n) {
		return
	}
	if !p.repath(now) {
		return // it moved less than an MPL ago
	}
	p.s.stats.LossRepaths++
	p.lossAvg = others / float64(n) // a new route starts from the connection's average
}

// SetPlaneUp tells the endpoint that a plane (a NIC port) went down or came
// back, as the NIC's link state says. The paths of every connection on that
// plane stop (DOWN: what they had in flight is resent on the others) or are
// probed and return to service.
func (e *Endpoint) SetPlaneUp(plane int, up bool) {
	now := e.clock.Now()
	for _, id := range e.connIDs() {
		c := e.conns[id]
		if c.state != Established {
			continue
		}
		c.snd.equip() // its paths on that plane change state, and probe
		for _, p := range c.snd.paths {
			switch {
			case p.plane != plane:
			case !up && p.state != pathmgr.Down:
				p.planeDown()
			case up && p.state == pathmgr.Down:
				p.planeUp(now)
			}
		}
		c.snd.pump()
	}
	e.flush()
}
