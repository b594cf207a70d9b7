// A path leaves a plane whose length holds its connection back (spec
// section 6.3). A path carries at most its window a round trip, and its
// window grows by a packet a round trip, so on a plane of longer links a
// path carries less, and takes longer to carry more, than on a shorter
// one. Where its connection has a plane none of its paths is on, that
// plane is probed with a PROBE as large as a data packet, and the path
// moves there when the probe's round trip is shorter than the path's least
// by more than a quarter.

package engine

import (
	"math"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/proto"
)

// Constants of leaving a long plane.
const (
	// longPlaneBacklog is how many of a path's windows must be left to
	// send for it to leave: it drains for a round trip first.
	longPlaneBacklog = 4
	// longPlaneClear is how many of its round trips a path below its cap
	// must go unmarked: a path that congestion cuts is held by the
	// congestion, which a move does not cure.
	longPlaneClear = 8
	// longPlaneUnder is the share of its hint under which a connection's
	// acknowledged rate must be: one paced at its hint acknowledges a
	// little under it.
	longPlaneUnder = 0.75
)

// heldByLength reports whether the path's length holds its connection
// back: its receiver sends rate hints and the peer acknowledges well under
// what they grant, more than a few of the path's windows are posted and
// unsent, every path of the connection on another plane is shorter by
// more than a quarter (longest), the path's packets queue on their way
// for less than a quarter of its least RTT, and its window is at its cap
// or has grown unmarked for longPlaneClear of its round trips. The
// acknowledged rate, not the windows': a window on a short plane may be
// far more than its port or link lets through. A path whose packets queue
// is held by its link or a bottleneck, not by its window; the one-way
// queue and not the round trip's, since a path's ACKs may come back over
// other planes. Without hints nothing tells a connection that its receiver
// holds it.
func (s *sender) heldByLength(p *sendPath, now clock.Time) bool {
	if !p.InUse() || p.returning || p.RTT.Samples == 0 || !p.queued || p.queue >= p.RTT.Min/4 ||
		math.IsInf(s.hint, 1) || s.train.at == 0 ||
		s.delivery.rate == 0 || s.delivery.rate >= longPlaneUnder*s.hint ||
		s.unsent < uint64(longPlaneBacklog*p.window)*uint64(s.mss) || !s.longest(p) {
		return false
	}
	return p.window >= s.c.ep.cfg.PathWindow || now.Sub(max(p.markedAt, s.train.at)) >= longPlaneClear*p.RTT.SRTT
}

// longest reports whether every path of the connection on another plane,
// in service and sampled, is shorter than p by more than a quarter: where
// the planes are as long as each other, or p is not the longest, no plane
// would be found a quarter shorter. A path with no such sibling cannot
// tell, and may probe.
func (s *sender) longest(p *sendPath) bool {
	for _, q := range s.paths {
		if q.Plane() != p.Plane() && q.InUse() && q.RTT.Samples > 0 && q.RTT.Min >= p.RTT.Min-p.RTT.Min/4 {
			return false
		}
	}
	return true
}

// seekShorterPlane starts a search for a shorter plane when p is held by
// its plane's length (heldByLength) and may move, once an MPL at most and
// not while a path is stuck (wantsPlane): it probes the planes none of the
// connection's paths is on. Each probe is padded to the size of the
// connection's data packets, so that its round trip counts the time a
// data packet takes to cross each link, as the path's least RTT does; an
// unpadded probe's would be shorter on any plane. It runs at every ACK
// record that resolves a packet, so a connection with a path on every
// plane, most of them, stops at hasSparePlane, a pass over the planes,
// before heldByLength's pass over its paths.
func (s *sender) seekShorterPlane(p *sendPath, now clock.Time) {
	c := s.c
	if now < s.shorterAt || now < p.MovableAt() || c.mode != proto.ModeMultipath || c.state != Established ||
		!s.hasSparePlane() || !s.heldByLength(p, now) || s.wantsPlane() {
		return
	}
	s.shorterAt = now.Add(c.ep.cfg.MPL)
	s.ensurePlaneProbes()
	if s.seekPlanes == nil {
		s.seekPlanes = make([]bool, len(s.planeProbe))
	}
	s.endSeek()
	s.seekFor = p
	hlen, _ := proto.HeaderLen(proto.TypeProbe, 0)
	for plane, on := range s.pathsOnPlanes() {
		if on == 0 && c.knows(plane) && !c.ep.down[plane] && s.planeProbe[plane] == 0 {
			s.probePlane(plane, c.sendMax-hlen-c.trailerLen())
			s.seekPlanes[plane] = true
		}
	}
}

// hasSparePlane reports whether the connection knows its peer's address on
// a plane none of its paths is on.
func (s *sender) hasSparePlane() bool {
	for plane, on := range s.pathsOnPlanes() {
		if on == 0 && s.c.knows(plane) {
			return true
		}
	}
	return false
}

// seeking reports whether plane's probe in flight is the search's.
func (s *sender) seeking(plane int) bool { return s.seekPlanes != nil && s.seekPlanes[plane] }

// endSeek ends the search: its probes still in flight are no longer
// waited for.
func (s *sender) endSeek() {
	s.seekFor = nil
	clear(s.seekPlanes)
}

// leaveLongPlane takes the round trip of a spare plane's probe of the
// search. If it is shorter than the least RTT of the path the search is
// for by more than a quarter, and the path is still held by its length,
// the search ends: the path drains and goes there (goTo), and the plane
// becomes its home. The shortest plane answers first.
func (s *sender) leaveLongPlane(plane int, rtt time.Duration, now clock.Time) {
	p := s.seekFor
	if p == nil || rtt >= p.RTT.Min-p.RTT.Min/4 || s.wantsPlane() || now < p.MovableAt() || !s.heldByLength(p, now) {
		return
	}
	s.endSeek()
	p.goTo(plane, now)
}
