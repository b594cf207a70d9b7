// A path as the sender keeps it: its PSN ring of send records, its
// packets in flight and its congestion window (spec sections 6.1-6.2).

package engine

import (
	"time"

	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/pathmgr"
)

// sendRec is one transmission on a path: the ring entry of its PSN.
type sendRec struct {
	psn      uint32 // which PSN the slot holds
	dsn      uint32
	sentAt   clock.Time
	resolved bool // acknowledged, declared lost, or refused
}

// sendPath is the sender's state of one path, laid out by what reads it
// (with thousands of connections a path's state has left the caches since
// its last packet, and each line is one to fetch): a packet sent reads
// lines 0, 1 and 3, an ACK's record of the path lines 0 to 3.
type sendPath struct {
	// Line 0: what checking whether a path can take a packet reads
	// (usable), and the path's number. (sendPathSize keeps a path a
	// whole number of lines; TestSendPathIsWholeLines, on 64-bit
	// machines.)
	ring     []sendRec // PSN psn in slot psn & (len - 1): 4 slots, doubled as needed up to 256
	next     uint32    // next PSN
	oldest   uint32    // oldest PSN not resolved
	inflight int
	window   int
	plane    int
	state    pathmgr.State
	epoch    uint8
	port     uint16
	probed   bool  // a tail probe went out since the last acknowledgment
	id       uint8 // its index in the sender's paths (at most 256)
	timeouts uint8 // consecutive retransmission timeouts (saturating)
	// Line 1: what sending on the path and its ACKs read next: its
	// window, its timer and the round trip the timer is armed from.
	s     *sender
	cwin  *cc.Window
	timer clock.Timer
	rtt   pathmgr.RTT
	// Line 2: what the path's ACKs read besides.
	epochStart [4]uint32 // first PSN of each epoch value's latest use
	ce         uint32    // the receiver's CE count for the path, as last reported
	probeID    uint32
	// Loss as the path's own ACKs report it, over rounds of lossRound
	// packets: this round's counts and the rounds' smoothed loss fraction
	// (-1: no round yet). Losses a timeout or a failed plane declares are
	// not the route's loss rate and do not count.
	roundAcked, roundLost int
	lossAvg               float64
	portIndex             int        // into Config.SourcePorts
	skipUntil             clock.Time // a SKIP path turns GOOD again after this, without news
	// Lines 3 and 4: the counters, the packets sent and acknowledged
	// among the first seven.
	ctr        pathmgr.Counters
	repathedAt clock.Time
}

// A path keeps the PSNs it has not resolved in a ring of send records.
// 256 is the most the 256-bit bitvector can report; a path starts with 4
// slots and doubles them when it has that many unresolved, so that the
// thousands of connections of a large simulation (or a server) that send a
// few packets per path, or none, do not each hold 6 KiB per path.
const (
	minPathRing = 4
	maxPathRing = 256
)

// slot is PSN psn's send record (or the slot it would be in).
func (p *sendPath) slot(psn uint32) *sendRec { return &p.ring[psn&uint32(len(p.ring)-1)] }

// ringRoom reports whether the path can issue another PSN without reusing
// the ring slot of an unresolved one: the ring has a free slot, or can
// grow (transmit grows it).
func (p *sendPath) ringRoom() bool {
	return p.next-p.oldest < uint32(len(p.ring)) || len(p.ring) < maxPathRing
}

// growRing doubles the ring, moving the unresolved PSNs to their slots in
// it. Only the slots of PSNs from oldest to next are ever read, and
// transmit writes each before it is.
func (p *sendPath) growRing() {
	ring := make([]sendRec, 2*len(p.ring))
	for psn := p.oldest; psn != p.next; psn++ {
		ring[psn&uint32(len(ring)-1)] = *p.slot(psn)
	}
	p.ring = ring
}

// took and released count a packet in flight on the path and in the
// connection's total: the timers read the total at every packet, and a
// sum over the paths would read every path's state to learn it.
func (p *sendPath) took() { p.inflight++; p.s.inflightAll++ }

func (p *sendPath) released() { p.inflight--; p.s.inflightAll-- }

// inflight is the packets sent on any path and not yet resolved.
func (s *sender) inflight() int { return s.inflightAll }

func (p *sendPath) advance() {
	for p.oldest != p.next && p.slot(p.oldest).resolved {
		p.oldest++
	}
}

// rateChanged notes the path's window, minimum RTT or state for the
// pacing rate. Whatever changes one of them calls it.
func (p *sendPath) rateChanged() {
	s := p.s
	w, rtt := 0.0, time.Duration(0)
	if p.state != pathmgr.Down && p.state != pathmgr.AssumedBad {
		w, rtt = p.cwin.Value()*s.mss, p.rtt.Min
	}
	if in := (cc.PathRate{WindowBytes: w, MinRTT: rtt}); s.rateIn[p.id] != in {
		s.rateIn[p.id], s.rateStale = in, true
	}
}

// windowChanged follows a change of the path's congestion window.
func (p *sendPath) windowChanged() {
	p.window = p.cwin.Packets()
	p.rateChanged()
}

// rttSample adds an RTT sample to the path's estimate.
func (p *sendPath) rttSample(sample time.Duration) {
	p.rtt.Update(sample)
	p.rateChanged()
}
