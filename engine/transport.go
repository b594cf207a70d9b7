// The two transports a connection may run. One is mroce's multipath
// selective repeat, the other the RoCEv2-like baseline of spec section 10.

package engine

import (
	"math"
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// transport is what the two modes of a connection do differently. The rest
// of the engine is shared, including messages, DSNs, paths, placement and
// ACK records. A connection's transport is fixed at the handshake.
type transport interface {
	recovery
	rateControl
	ordering
}

// recovery is how a sender chooses what to send and recovers what is lost.
type recovery interface {
	// sendOne sends one packet if the windows and the rate let it, and
	// reports whether it did.
	sendOne(s *sender) bool
	// gapsLost reports whether a PSN that an ACK record passes over is
	// declared lost and resent at once. Otherwise it is left for a resend
	// from the PSN the receiver names.
	gapsLost() bool
	// acked runs once an ACK's records are applied, before the sender
	// sends again; overdue runs after.
	acked(s *sender)
	overdue(s *sender, at clock.Time)
	// expired handles a path's timer. It reports false when nothing
	// follows, with no timer to arm again and nothing new to send.
	expired(p *sendPath, now clock.Time) bool
	// timeout is how long the path's timer waits from now. rto is the
	// retransmission timeout after timeouts in a row.
	timeout(p *sendPath) time.Duration
	rto(p *sendPath, timeouts int) time.Duration
	// planeDown and planeUp follow the path's plane.
	planeDown(p *sendPath)
	planeUp(p *sendPath, now clock.Time)
	// refused handles a NACK that does not end the connection (spec section
	// 7). r is the record of its DSN, or nil when none is in flight.
	refused(s *sender, n proto.NackHeader, r *dsnRecord)
	// dropped handles the transmission r, PSN psn of path p, that the local
	// host dropped on its way out (localdrop.go).
	dropped(s *sender, p *sendPath, r *sendRec, psn uint32)
	// stop stops the transport's own timers when the connection ends.
	stop()
}

// rateControl is how a sender sets its windows and its rate.
type rateControl interface {
	// window is the congestion-window parameters of each of c's paths.
	window(c *Conn) cc.WindowParams
	// hint takes an ACK's rate hint. It reports whether the connection's
	// share fell.
	hint(s *sender, h uint64) bool
	// cnp takes a congestion notification (spec section 5.7).
	cnp(s *sender, at clock.Time)
}

// ordering is how a receiver takes data packets.
type ordering interface {
	// admit reports whether a data packet goes on to the DSN check (spec
	// section 9, step 9).
	admit(r *receiver, h proto.CommonHeader, d *link.Datagram, plane int, at clock.Time) bool
	// placed follows a data packet placed, and nacked a data packet
	// refused.
	placed()
	nacked(psn uint32)
	// hints reports whether the receiver's ACKs carry rate hints.
	hints() bool
}

// multipath is mroce's transport. It sprays packets over many paths and
// repeats selectively from per-path ACK records, with tail probes,
// DCTCP-style windows and pacing to the receiver's rate hints.
type multipath struct{}

func (multipath) sendOne(s *sender) bool                   { return s.sendSprayed() }
func (multipath) gapsLost() bool                           { return true }
func (multipath) acked(s *sender)                          { s.startFromHint(s.c.ep.clock.Now()) }
func (multipath) expired(p *sendPath, now clock.Time) bool { return p.expired(now) }
func (multipath) timeout(p *sendPath) time.Duration        { return p.probeTimeout() }
func (multipath) rto(p *sendPath, timeouts int) time.Duration {
	return p.adaptiveRTO(timeouts)
}
func (multipath) planeDown(p *sendPath)               { p.planeDown() }
func (multipath) planeUp(p *sendPath, now clock.Time) { p.planeUp(now) }
func (multipath) refused(s *sender, n proto.NackHeader, r *dsnRecord) {
	s.onRefused(n, r)
}
func (multipath) cnp(*sender, clock.Time) {}
func (multipath) stop()                   {}

// dropped resends the packet at once, counting it against no path, and
// cuts the connection's rate to what its host lets out, or, where the
// drop was by its plane's own queue, that plane's (localdrop.go).
func (multipath) dropped(s *sender, p *sendPath, r *sendRec, psn uint32) {
	p.resolveLost(r, psn, LossLocal)
	p.advance()
	s.hostDropped(p.Plane(), s.c.ep.clock.Now())
}
func (multipath) admit(*receiver, proto.CommonHeader, *link.Datagram, int, clock.Time) bool {
	return true
}
func (multipath) placed()       {}
func (multipath) nacked(uint32) {}
func (multipath) hints() bool   { return true }

// overdue sends a copy of the oldest DSN not acknowledged when half the
// receive window waits behind it (see copyHead).
func (multipath) overdue(s *sender, at clock.Time) {
	if s.nextDSN-s.una >= s.window/2 {
		s.copyHead(at)
	}
}

// wholePacketWindows holds the paths' windows to a packet or more, as
// before they could fall under one, for the tests that measure them.
var wholePacketWindows bool

// window spreads DefaultWindow.Initial packets over the connection's paths.
// Before the first acknowledgment and the receiver's hint, the connection
// sends a burst of one window, not one per path.
func (multipath) window(c *Conn) cc.WindowParams {
	wp := cc.DefaultWindow
	wp.Max = float64(c.ep.cfg.PathWindow)
	if wholePacketWindows {
		wp.Min = 1
	}
	wp.Initial = min(max(wp.Min, math.Ceil(wp.Initial/float64(c.paths))), wp.Max)
	wp.Delay.Target = max(0, c.ep.cfg.DelayTarget)
	return wp
}

// hint follows the receiver's fair share (spec sections 5.5 and 6.6).
func (multipath) hint(s *sender, h uint64) bool {
	hint := math.Inf(1)
	if h != proto.RateNoLimit {
		hint = float64(h)
	}
	if hint > s.hint {
		s.pacer.Faster(hint) // a gap taken at the old rate must not hold the new rate back
		if s.hinted() && !math.IsInf(hint, 1) {
			s.shareRose(s.c.ep.clock.Now())
		}
	}
	lower := hint < s.hint
	if hint != s.hint && s.c.ep.tracer != nil {
		s.c.trace(TraceEvent{Kind: TraceHint, Path: -1, Value: hint})
	}
	s.hint = hint
	return lower
}
