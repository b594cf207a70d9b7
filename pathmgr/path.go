package pathmgr

import (
	"time"

	"github.com/mroce/mroce/clock"
)

// Ports is how the paths of a connection take source ports, by spec
// section 6.3. Path i starts on Pool[i mod len(Pool)].
type Ports struct {
	// Pool is the source ports the paths take. It is never empty.
	Pool []uint16
	// Stride is how far a repath moves in the pool. It is the
	// connection's path count, so that two paths never take the same port.
	Stride int
	// MPL is the maximum packet lifetime. A path moves at most once per
	// MPL, so that a PSN range never lives in two routes' queues at once,
	// and a path that keeps moving waits longer (see Path.Repath).
	MPL time.Duration
}

// A Listener hears of every transition a path makes, and of every repath.
// It is called after the path has changed.
type Listener interface {
	PathChanged(from State, repath bool)
}

// Path is one path of a connection as its sender keeps it. It holds its
// plane and source port, its epoch, its state of spec section 6.4, its
// probes, its round-trip time, its loss and its counters. The sender's
// packets and timers stay in the engine, which tells the path what
// happened and acts on what the path says. Nothing here does I/O or reads
// a clock.
type Path struct {
	// What the path is now.
	id    uint8
	state State
	epoch uint8
	port  uint16
	plane int
	// skipUntil is when a SKIP path turns GOOD again without news.
	skipUntil clock.Time
	// epochStart holds the first PSN of each epoch value's latest use.
	// An ACK record of epoch e says nothing of PSNs before it, by section
	// 6.3.
	epochStart [4]uint32

	// What its ACKs measure and its packets count.
	RTT      RTT
	Counters Counters

	// Bookkeeping of repaths, probes and loss. portIndex is where port
	// lies in the pool. moves counts the repaths in a row, each soon after
	// the one before. epochProbes is how many probes went out before the
	// current epoch began.
	portIndex   int
	ports       *Ports
	repathedAt  clock.Time
	planeSince  clock.Time // when Move last put the path on its plane, 0 if it never did
	moves       uint8
	probeID     uint32
	epochProbes uint32
	loss        lossMeter
	listener    Listener
}

// Repathing and probing limits.
const (
	// maxMoveBackoff caps the doubling of the wait between repaths in a
	// row: the longest wait is 2^maxMoveBackoff MPL.
	maxMoveBackoff = 5
	// probeMemory is how many of a path's newest probes a reply may
	// answer. On a busy host a reply can take longer than the interval
	// between probes, and a path whose replies all came after the next
	// probe would never return to service.
	probeMemory = 8
)

// Init makes p path id of its connection, on plane, starting at PSN
// firstPSN in epoch 0, in state GOOD. l hears of its transitions.
func (p *Path) Init(id uint8, plane int, ports *Ports, firstPSN uint32, l Listener) {
	*p = Path{id: id, plane: plane, ports: ports, listener: l}
	p.portIndex = int(id) % len(ports.Pool)
	p.port = ports.Pool[p.portIndex]
	p.epochStart[0] = firstPSN
	p.loss.avg = -1
}

// ID is the path's id, carried in every packet's PathID.
func (p *Path) ID() uint8 { return p.id }

// Plane is the plane the path runs on.
func (p *Path) Plane() int { return p.plane }

// State is the path's state.
func (p *Path) State() State { return p.state }

// Port is the path's UDP source port now.
func (p *Path) Port() uint16 { return p.port }

// Epoch is the path's epoch now.
func (p *Path) Epoch() uint8 { return p.epoch }

// EpochStart is the first PSN of epoch value e's latest use, or a PSN
// epochHorizon before the path's next one where that is later (AgeEpochs).
func (p *Path) EpochStart(e uint8) uint32 { return p.epochStart[e&3] }

// epochHorizon is how far before the path's next PSN an epoch's first PSN
// is kept. An epoch longer than 2^31 PSNs would otherwise put its start
// where serial order turns round (spec section 2), and every ACK record of
// it would read as older than its start. No packet in flight lies that far
// back: a path's window is far smaller.
const epochHorizon = 1 << 30

// AgeEpochs brings every epoch's first PSN to within epochHorizon of next,
// the path's next PSN (spec section 6.3). The sender calls it as it sends.
func (p *Path) AgeEpochs(next uint32) {
	for e, start := range p.epochStart {
		if next-start > epochHorizon {
			p.epochStart[e] = next - epochHorizon
		}
	}
}

// InUse reports whether the path carries data, being neither ASSUMED_BAD
// nor DOWN. Its window counts in the connection's rate only then.
func (p *Path) InUse() bool { return p.state != AssumedBad && p.state != Down }

// Ready reports whether the path takes new data now. It does when GOOD,
// or SKIP when skip is set. A SKIP path whose hold is over turns GOOD
// first, since a round trip without a mark clears it.
func (p *Path) Ready(now clock.Time, skip bool) bool {
	if p.state == Skip && now >= p.skipUntil {
		p.set(Good, false)
	}
	return p.state == Good || skip && p.state == Skip
}

// Marked notes a CE mark in an ACK of the path. A GOOD or SKIP path is
// held in SKIP for hold from now, and new data prefers other paths.
func (p *Path) Marked(now clock.Time, hold time.Duration) {
	if p.state != Good && p.state != Skip {
		return
	}
	p.skipUntil = now.Add(hold)
	if p.state == Good {
		p.set(Skip, false)
	}
}

// Clean notes an ACK of the path that resolved packets without a CE mark.
// A SKIP path turns GOOD.
func (p *Path) Clean() {
	if p.state == Skip {
		p.set(Good, false)
	}
}

// Delivered notes that the path delivered packets, as an ACK resolved
// some or a probe was answered. An ASSUMED_BAD path turns GOOD, and
// Delivered reports whether it did.
func (p *Path) Delivered() bool {
	if p.state != AssumedBad {
		return false
	}
	p.set(Good, false)
	return true
}

// TimedOut notes a retransmission timeout. The path turns ASSUMED_BAD,
// takes no new data and is probed until it answers.
func (p *Path) TimedOut() { p.set(AssumedBad, false) }

// PlaneDown notes that the path's plane went down.
func (p *Path) PlaneDown() { p.set(Down, false) }

// PlaneUp notes that the path's plane came back. With probe the path
// waits for an answered probe in ASSUMED_BAD; without, it is GOOD at once.
func (p *Path) PlaneUp(probe bool) {
	if probe {
		p.set(AssumedBad, false)
	} else {
		p.set(Good, false)
	}
}

// NewProbe returns the id of a new PROBE on the path.
func (p *Path) NewProbe() uint32 {
	p.probeID++
	if p.probeID >= 1<<31 {
		p.probeID = 1 // 0 is a keep-alive's (spec section 8.6), and from 2^31 on the path MTU search's (6.7)
	}
	return p.probeID
}

// ProbeAnswers reports whether a PROBE_REPLY with probe id and epoch
// answers one of the path's probeMemory newest probes, sent in its current
// epoch. A reply from before a repath tested the old route, not this one.
func (p *Path) ProbeAnswers(id uint32, epoch uint8) bool {
	age := p.probeID - id
	return epoch == p.epoch && age < probeMemory && age < p.probeID-p.epochProbes
}

// Repath gives the path another source port from the pool. Its epoch
// advances and its PSN space continues at nextPSN, by spec section 6.3.
//
// A path moves at most once per MPL. Each move soon after the one before
// doubles that wait, up to 2^maxMoveBackoff MPL: a new port that did not
// help is not followed at once by the next, so a path whose trouble no
// port cures (its plane, or its host) never moves in a loop. A path that
// stayed on one port for twice the longest wait starts afresh. When the
// path may not move yet, Repath reports false and the path stays.
func (p *Path) Repath(now clock.Time, nextPSN uint32) bool {
	if !p.mayMove(now) {
		return false
	}
	p.repath(now, nextPSN)
	return true
}

// Move repaths the path onto another plane: a new NIC port as well as a
// new source port (spec section 6.3), for a path whose plane failed. Its
// round-trip time starts afresh, since the new route's is its own. It
// waits between moves as Repath does, and reports false when the path may
// not move yet.
func (p *Path) Move(now clock.Time, nextPSN uint32, plane int) bool {
	if !p.mayMove(now) {
		return false
	}
	p.plane, p.planeSince = plane, now
	p.RTT = RTT{}
	p.Counters.PlaneMoves++
	p.repath(now, nextPSN)
	return true
}

// RepathedAt is when the path last moved to a new source port or plane,
// and 0 if it never did.
func (p *Path) RepathedAt() clock.Time { return p.repathedAt }

// PlaneSince is when the path last moved to another plane (Move), and 0
// if it never did.
func (p *Path) PlaneSince() clock.Time { return p.planeSince }

// MovableAt is when the path may next repath or move (see Repath): at
// once for a path that never has.
func (p *Path) MovableAt() clock.Time {
	if p.Counters.Repaths == 0 {
		return 0
	}
	return p.repathedAt.Add(p.ports.MPL << max(p.moves, 1) >> 1)
}

// mayMove reports whether the path may repath now (see Repath).
func (p *Path) mayMove(now clock.Time) bool {
	if p.Counters.Repaths > 0 && now.Sub(p.repathedAt) >= 2*p.ports.MPL<<maxMoveBackoff {
		p.moves = 0
	}
	return now >= p.MovableAt()
}

// repath gives the path its next source port and epoch.
func (p *Path) repath(now clock.Time, nextPSN uint32) {
	n := len(p.ports.Pool)
	next := (p.portIndex + p.ports.Stride) % n
	if next == p.portIndex {
		next = (next + 1) % n // the pool is a multiple of the stride, so step off
	}
	p.portIndex = next
	p.port = p.ports.Pool[next]
	p.repathedAt = now
	p.epoch = (p.epoch + 1) & 3
	p.epochStart[p.epoch] = nextPSN
	p.epochProbes = p.probeID
	p.moves = min(p.moves+1, maxMoveBackoff+1)
	p.Counters.Repaths++
	p.set(p.state, true)
}

// set moves the path to st and tells the listener.
func (p *Path) set(st State, repath bool) {
	from := p.state
	if st == from && !repath {
		return // no transition: the listener hears of changes only
	}
	p.state = st
	if p.listener != nil {
		p.listener.PathChanged(from, repath)
	}
}

// Snapshot is the path's telemetry, with the engine's packets in flight
// and window.
func (p *Path) Snapshot(inFlight, window int) Telemetry {
	return Telemetry{Path: int(p.id), Plane: p.plane, SrcPort: p.port, Epoch: p.epoch, State: p.state,
		RTT: p.RTT, InFlight: inFlight, Window: window, Counters: p.Counters}
}
