package cc

import (
	"math"
	"slices"
	"time"
)

// AllocParams are a receiver's allocation parameters.
type AllocParams struct {
	// Capacity is the inbound rate to share, bytes/s.
	Capacity float64
	// Horizon turns a declared backlog into a demand: a sender with B
	// bytes left wants B / Horizon bytes/s (a greedy sender, more than its
	// share). A sender silent for a Horizon has left.
	Horizon time.Duration
	// Quiet, when set, is how long a connection may go without a packet
	// before it is forgotten, in place of the rule for senders to a
	// receiver (the horizon, or eight of its packets at the level). A
	// host's own connections leave by Leave; a long Quiet only forgets
	// one that stalled without saying so.
	Quiet time.Duration
}

// Allocator is a max-min fair share of a capacity among connections. A
// receiver's shares its inbound capacity among the connections sending to
// it (demands from their declared backlogs; the share is the rate hint
// their ACKs carry); a sender's shares its NIC among its connections with
// data to send (each wanting the rate its windows and hint allow).
type Allocator struct {
	p          AllocParams
	flows      map[uint32]*flow
	level      float64 // the water level: every active connection's hint
	lastExpire int64
	demands    []float64 // recompute's scratch
}

type flow struct {
	demand   float64 // bytes/s: the declared backlog over the horizon, at most the capacity
	used     float64 // the demand the last recompute used
	lastSeen int64
	bytes    int // the last packet's size
}

// NewAllocator returns an allocator with no senders.
func NewAllocator(p AllocParams) *Allocator {
	return &Allocator{p: p, flows: map[uint32]*flow{}, level: p.Capacity}
}

// Observe notes a data packet from connection id declaring backlog bytes
// still to send, at now (ns): its demand is the backlog over the horizon.
// It reports whether the allocation changed.
func (a *Allocator) Observe(id uint32, backlog uint64, bytes int, now int64) bool {
	return a.ObserveDemand(id, float64(backlog)/a.p.Horizon.Seconds(), bytes, now)
}

// ObserveDemand notes a packet of bytes from connection id wanting demand
// bytes/s, at now (ns). It reports whether the allocation changed.
//
// The allocation is recomputed only when it can change: a connection
// appears or leaves, turns from greedy (wanting at least the level) to not
// or back, or, not greedy, changes its demand by more than a tenth. Each
// packet of a greedy connection costs a map lookup.
func (a *Allocator) ObserveDemand(id uint32, demand float64, bytes int, now int64) bool {
	d := math.Min(demand, a.p.Capacity)
	f := a.flows[id]
	dirty := false
	switch {
	case f == nil:
		f = &flow{used: d}
		a.flows[id] = f
		dirty = true
	case (d >= a.level) != (f.used >= a.level):
		dirty = true
	case d < a.level && math.Abs(d-f.used) > 0.1*f.used:
		dirty = true // compared with what the allocation used: slow drifts count
	}
	f.demand, f.lastSeen, f.bytes = d, now, bytes
	if now-a.lastExpire > int64(a.p.Horizon)/2 {
		a.lastExpire = now
		if a.expire(now) {
			dirty = true
		}
	}
	if dirty {
		return a.recompute()
	}
	return false
}

// Leave removes connection id (it closed).
func (a *Allocator) Leave(id uint32) {
	if _, ok := a.flows[id]; ok {
		delete(a.flows, id)
		a.recompute()
	}
}

// Share is the rate (bytes/s) connection id may send at: the water level
// for a sender, and the whole capacity for one not (yet) sending.
func (a *Allocator) Share(id uint32) float64 {
	if _, ok := a.flows[id]; !ok {
		return a.p.Capacity
	}
	return a.level
}

// Senders is the number of active senders.
func (a *Allocator) Senders() int { return len(a.flows) }

// expire removes the senders silent for longer than the horizon, or than
// eight of their packets at the level (a sender paced at its share sends a
// packet every bytes/level: it must not be forgotten between two).
func (a *Allocator) expire(now int64) bool {
	gone := false
	for id, f := range a.flows {
		quiet := max(int64(a.p.Horizon), int64(8*float64(f.bytes)/a.level*1e9))
		if a.p.Quiet > 0 {
			quiet = int64(a.p.Quiet)
		}
		if now-f.lastSeen > quiet {
			delete(a.flows, id)
			gone = true
		}
	}
	return gone
}

// recompute fills the water level: the largest L with sum of min(demand,
// L) <= Capacity. Every sender gets L as its hint; one that wants less
// uses less, and the rest is what the others share.
func (a *Allocator) recompute() bool {
	a.demands = a.demands[:0]
	for _, f := range a.flows {
		f.used = f.demand
		a.demands = append(a.demands, f.demand)
	}
	level := waterLevel(a.demands, a.p.Capacity)
	changed := level != a.level
	a.level = level
	return changed
}

// waterLevel returns the max-min level for demands sharing capacity.
func waterLevel(demands []float64, capacity float64) float64 {
	if len(demands) == 0 {
		return capacity
	}
	slices.Sort(demands)
	left := capacity
	for i, d := range demands {
		fair := left / float64(len(demands)-i)
		if d >= fair {
			return fair
		}
		left -= d
	}
	// Everyone wants less than an equal share: the level is what the
	// largest could take on top of what the others use.
	return math.Max(left+demands[len(demands)-1], demands[len(demands)-1])
}
