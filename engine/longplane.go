// A path leaves a plane whose length holds its connection back (spec
// section 6.3). A path carries at most its window each round trip, and its
// window grows by a packet a round trip, so on a plane of longer links a
// path carries less, and takes longer to carry more, than on a shorter
// one. Where its connection has a plane none of its paths is on, that
// plane is probed, and the path moves there when the probe's round trip
// is shorter by more than a quarter.

package engine

import (
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
	// acknowledged rate must be.
	longPlaneUnder = 0.75
)

// heldByLength reports whether the path's length holds its connection
// back: the peer acknowledges well under what its hint grants (a
// connection paced at its hint acknowledges a little under it), more than a few
// of the path's windows are posted and unsent, and the path's window is at
// its cap, or has grown unmarked for longPlaneClear of its round trips.
// The acknowledged rate, not the windows': a window on a short plane may
// be far more than its port or link lets through.
func (s *sender) heldByLength(p *sendPath, now clock.Time) bool {
	if !p.InUse() || p.returning || p.RTT.Samples == 0 || s.train.at == 0 || s.delivery.rate == 0 ||
		s.unsent < uint64(longPlaneBacklog*p.window)*uint64(s.mss) || s.delivery.rate >= longPlaneUnder*s.hint {
		return false
	}
	if !s.longest(p) {
		return false
	}
	return p.window >= s.c.ep.cfg.PathWindow || now.Sub(max(p.markedAt, s.train.at)) >= longPlaneClear*p.RTT.SRTT
}

// longest reports whether no path of the connection on another plane is
// as long as p, and any is shorter by more than a quarter: where the
// connection's planes are as long as each other, or p is not the longest,
// a probe of another plane would find none shorter by that much. A path
// with no sibling on another plane cannot tell, and may probe.
func (s *sender) longest(p *sendPath) bool {
	shorter := true
	for _, q := range s.paths {
		if q.Plane() == p.Plane() || !q.InUse() || q.RTT.Samples == 0 {
			continue
		}
		if q.RTT.Min >= p.RTT.Min {
			return false
		}
		shorter = shorter && q.RTT.Min < p.RTT.Min-p.RTT.Min/4
	}
	return shorter
}

// seekShorterPlane probes the planes none of the connection's paths is on
// when p is held by its plane's length (heldByLength) and may move, once
// an MPL at most: leaveLongPlane moves it if one is shorter.
func (s *sender) seekShorterPlane(p *sendPath, now clock.Time) {
	c := s.c
	if now < s.shorterAt || now < p.MovableAt() || c.mode != proto.ModeMultipath || c.state != Established ||
		!s.hasSparePlane() || !s.heldByLength(p, now) {
		return
	}
	s.shorterAt = now.Add(c.ep.cfg.MPL)
	s.ensurePlaneProbes()
	for plane, on := range s.pathsOnPlanes() {
		if on == 0 && c.knows(plane) && !c.ep.down[plane] && s.planeProbe[plane] == 0 {
			s.probePlane(plane)
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

// leaveLongPlane takes a plane probe's reply, with its round trip, for the
// path that its plane's length holds back most: the one held with the
// longest least RTT. If the plane's round trip is shorter than that by more
// than a quarter, the plane becomes the path's home, and the path drains
// and goes there (returnHome). It reports whether one goes.
func (s *sender) leaveLongPlane(plane int, rtt time.Duration, now clock.Time) bool {
	var longest *sendPath
	for _, p := range s.paths {
		if now >= p.MovableAt() && s.heldByLength(p, now) && (longest == nil || p.RTT.Min > longest.RTT.Min) {
			longest = p
		}
	}
	if longest == nil || rtt >= longest.RTT.Min-longest.RTT.Min/4 {
		return false
	}
	longest.home = plane
	longest.returnHome(now)
	s.stats.ShorterMoves++
	return true
}
