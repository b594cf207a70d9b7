package engine

import (
	"fmt"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
)

// A Tracer hears of the sender's decisions as the engine makes them. It
// hears of each data packet sent, acknowledged or declared lost, each
// path's change of state, each timer that fires, and each change of a
// path's window and of the receiver's rate hint. It is how a reader watches
// the protocol decide, in the manner of QUIC's qlog. Trace runs on the
// engine's goroutine. It must be quick and must not call the engine.
// Without a tracer the engine builds no event.
type Tracer interface {
	Trace(ev TraceEvent)
}

// TraceKind is what a TraceEvent reports.
type TraceKind uint8

const (
	// TraceSent is a data packet's transmission, first or resent.
	TraceSent TraceKind = iota + 1
	// TraceAcked is a transmission an ACK record reports received.
	TraceAcked
	// TraceLost is a transmission declared lost. Loss says why.
	TraceLost
	// TracePath is a path's change of state, or a repath.
	TracePath
	// TraceTimer is a path's timer firing, in the state the path had.
	TraceTimer
	// TraceWindow is a change of a path's congestion window in whole
	// packets, or of its fraction of a packet under one.
	TraceWindow
	// TraceHint is a change of the rate hint the sender follows.
	TraceHint
)

func (k TraceKind) String() string {
	switch k {
	case TraceSent:
		return "sent"
	case TraceAcked:
		return "acked"
	case TraceLost:
		return "lost"
	case TracePath:
		return "path"
	case TraceTimer:
		return "timer"
	case TraceWindow:
		return "window"
	case TraceHint:
		return "hint"
	}
	return fmt.Sprintf("TraceKind(%d)", uint8(k))
}

// LossCause is why a transmission was declared lost.
type LossCause uint8

const (
	// LossGap means an ACK record's highest PSN passed the transmission,
	// unacknowledged (spec section 6.6).
	LossGap LossCause = iota + 1
	// LossTimeout means the path's retransmission timeout fired.
	LossTimeout
	// LossPlaneDown means the path's plane went down.
	LossPlaneDown
	// LossLocal means the local host dropped the packet on its way out,
	// a queue there full (link.LocalDropHandler).
	LossLocal
	// LossOvertaken means a transmission sent after the packet on another
	// path arrived first: in a first window of one BDP (lostOvertaken), or
	// at the tail of a transfer (lostAtTail).
	LossOvertaken
)

func (c LossCause) String() string {
	switch c {
	case LossGap:
		return "gap"
	case LossTimeout:
		return "timeout"
	case LossPlaneDown:
		return "plane-down"
	case LossLocal:
		return "local"
	case LossOvertaken:
		return "overtaken"
	}
	return ""
}

// TraceEvent is one decision of the engine. Fields that do not apply to
// its Kind are zero.
type TraceEvent struct {
	Kind TraceKind
	At   clock.Time
	Conn uint32 // the connection's local id
	Path int    // the path's id, or -1 for a connection's event (TraceHint)
	PSN  uint32 // the transmission's, for TraceSent, TraceAcked and TraceLost
	DSN  uint32
	// Bytes is a sent packet's payload.
	Bytes int
	// Retransmit and Probe describe a sent packet. Retransmit is content
	// sent before. Probe is a tail probe, or its copy, asking for an ACK at
	// once.
	Retransmit, Probe bool
	// RTT is an acknowledged transmission's round trip.
	RTT  time.Duration
	Loss LossCause
	// From and To are a path's states before and after a TracePath. For a
	// TraceTimer both are its state when its timer fired. Repath, SrcPort
	// and Epoch go with TracePath.
	From, To pathmgr.State
	Repath   bool
	SrcPort  uint16
	Epoch    uint8
	// Value is a path's new window in packets for TraceWindow, whole or,
	// under one packet, its fraction. For
	// TraceHint it is the new hint in bytes of payload a second, +Inf for
	// no limit.
	Value float64
}

// String is one line a person reads.
func (ev TraceEvent) String() string {
	head := fmt.Sprintf("%v conn %08x", time.Duration(ev.At), ev.Conn)
	switch ev.Kind {
	case TraceSent:
		what := "new"
		switch {
		case ev.Probe:
			what = "probe"
		case ev.Retransmit:
			what = "resend"
		}
		return fmt.Sprintf("%s path %d sent psn %d dsn %d (%s, %d B)", head, ev.Path, ev.PSN, ev.DSN, what, ev.Bytes)
	case TraceAcked:
		return fmt.Sprintf("%s path %d acked psn %d dsn %d rtt %v", head, ev.Path, ev.PSN, ev.DSN, ev.RTT)
	case TraceLost:
		return fmt.Sprintf("%s path %d lost psn %d dsn %d (%v)", head, ev.Path, ev.PSN, ev.DSN, ev.Loss)
	case TracePath:
		s := fmt.Sprintf("%s path %d %v -> %v port %d epoch %d", head, ev.Path, ev.From, ev.To, ev.SrcPort, ev.Epoch)
		if ev.Repath {
			s += " (repath)"
		}
		return s
	case TraceTimer:
		return fmt.Sprintf("%s path %d timer fired in %v", head, ev.Path, ev.From)
	case TraceWindow:
		return fmt.Sprintf("%s path %d window %g", head, ev.Path, ev.Value)
	case TraceHint:
		return fmt.Sprintf("%s hint %g B/s", head, ev.Value)
	}
	return head + " " + ev.Kind.String()
}

// trace hands ev to the endpoint's tracer, stamped with the connection and
// the time. Callers check c.ep.tracer first, so that no event is built
// without one.
func (c *Conn) trace(ev TraceEvent) {
	ev.Conn, ev.At = c.localID, c.ep.clock.Now()
	c.ep.tracer.Trace(ev)
}
