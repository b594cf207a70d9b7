package cc

import (
	"math"
	"slices"
	"time"
)

// AllocParams are a receiver's allocation parameters.
type AllocParams struct {
	// Capacity is the inbound rate to share, in bytes/s.
	Capacity float64
	// Horizon turns a declared backlog into a demand. A sender with B bytes
	// left wants B / Horizon bytes/s, and a greedy sender wants more than
	// its share. A sender silent for a Horizon has left.
	Horizon time.Duration
	// Quiet, when set, is how long a connection may go without a packet
	// before it is forgotten. It replaces the rule for senders to a
	// receiver, which is the horizon or eight of its packets at the level.
	// A host's own connections leave by Leave, and a long Quiet only
	// forgets one that stalled without saying so.
	Quiet time.Duration
}

// Allocator is a max-min fair share of a capacity among connections. A
// receiver's Allocator shares its inbound capacity among the connections
// sending to it. Their demands come from their declared backlogs, and their
// ACKs carry the share as the rate hint. A sender's Allocator shares its
// NIC among its connections with data to send, each wanting the rate its
// windows and hint allow.
type Allocator struct {
	p          AllocParams
	flows      map[uint32]*flow
	active     []*flow // the flows in the map, in no order, which a recompute or an expiry walks
	level      float64 // the water level, every active connection's hint
	lastExpire int64
	demands    []float64 // recompute's scratch
}

type flow struct {
	demand   float64 // the declared backlog over the horizon in bytes/s, at most the capacity
	used     float64 // the demand the last recompute used
	lastSeen int64
	bytes    int  // the last packet's size
	in       bool // in flows, false once it expired or left while a Member may still hold it
	id       uint32
	at       int // its index in active, while in
}

// NewAllocator returns an allocator with no senders.
func NewAllocator(p AllocParams) *Allocator {
	return &Allocator{p: p, flows: map[uint32]*flow{}, level: p.Capacity}
}

// Observe notes a data packet from connection id declaring backlog bytes
// still to send, at now in ns. Its demand is the backlog over the horizon.
// It reports whether the allocation changed.
func (a *Allocator) Observe(id uint32, backlog uint64, bytes int, now int64) bool {
	return a.ObserveDemand(id, float64(backlog)/a.p.Horizon.Seconds(), bytes, now)
}

// ObserveDemand notes a packet of bytes from connection id wanting demand
// bytes/s, at now in ns. It reports whether the allocation changed.
//
// The allocation is recomputed only when it can change. That is when a
// connection appears or leaves, turns from greedy to not or back, or
// changes its demand by more than a tenth while not greedy. A greedy
// connection wants at least the level. Each packet of a greedy connection
// costs a map lookup, or none through its Member.
func (a *Allocator) ObserveDemand(id uint32, demand float64, bytes int, now int64) bool {
	_, changed := a.observe(a.flows[id], nil, id, demand, bytes, now)
	return changed
}

// observe is ObserveDemand given id's entry f, or nil if it has none, and
// slot, where a new entry goes, or nil for a new allocation. It returns the
// entry.
func (a *Allocator) observe(f, slot *flow, id uint32, demand float64, bytes int, now int64) (*flow, bool) {
	d := min(demand, a.p.Capacity)
	dirty := false
	switch {
	case f == nil:
		if old := a.flows[id]; old != nil {
			a.remove(old) // id joined both by id and as a member, and keeps one entry
		}
		if slot == nil {
			slot = new(flow)
		}
		f = slot
		*f = flow{used: d, in: true, id: id, at: len(a.active)}
		a.flows[id] = f
		a.active = append(a.active, f)
		dirty = true
	case (d >= a.level) != (f.used >= a.level):
		dirty = true
	case d < a.level && math.Abs(d-f.used) > 0.1*f.used:
		dirty = true // compared with what the allocation used, so slow drifts count
	}
	f.demand, f.lastSeen, f.bytes = d, now, bytes
	if now-a.lastExpire > int64(a.p.Horizon)/2 {
		a.lastExpire = now
		if a.expire(now) {
			dirty = true
		}
	}
	if dirty {
		return f, a.recompute()
	}
	return f, false
}

// Leave removes connection id, which closed.
func (a *Allocator) Leave(id uint32) {
	if f, ok := a.flows[id]; ok {
		a.remove(f)
		a.recompute()
	}
}

func (a *Allocator) remove(f *flow) {
	delete(a.flows, f.id)
	last := a.active[len(a.active)-1]
	a.active[f.at], last.at = last, f.at
	a.active[len(a.active)-1] = nil
	a.active = a.active[:len(a.active)-1]
	f.in = false
}

// Member is connection id's entry in the allocation, for the connection to
// keep. Its methods are the allocator's for id without a map lookup per
// packet. A connection with a Member goes through it only, not through the
// id-based methods.
type Member struct {
	a *Allocator
	f *flow // the entry it last had, current while f.in holds
	// own is where the member's entry lives, beside the handle. An entry
	// that expired or left is out of the allocator's map before it is
	// reused. Its id is the member's connection's from the start.
	own flow
}

// Member returns connection id's handle.
func (a *Allocator) Member(id uint32) *Member { return &Member{a: a, own: flow{id: id}} }

// entry is the member's entry, or nil when it has none.
func (m *Member) entry() *flow {
	if m.f == nil || !m.f.in {
		return nil // never joined, left or expired
	}
	return m.f
}

// Observe is Allocator.Observe for the member.
func (m *Member) Observe(backlog uint64, bytes int, now int64) bool {
	return m.ObserveDemand(float64(backlog)/m.a.p.Horizon.Seconds(), bytes, now)
}

// ObserveDemand is Allocator.ObserveDemand for the member.
func (m *Member) ObserveDemand(demand float64, bytes int, now int64) bool {
	var changed bool
	m.f, changed = m.a.observe(m.entry(), &m.own, m.own.id, demand, bytes, now)
	return changed
}

// Share is Allocator.Share for the member.
func (m *Member) Share() float64 {
	if m.entry() == nil {
		return m.a.p.Capacity
	}
	return m.a.level
}

// Leave is Allocator.Leave for the member.
func (m *Member) Leave() {
	if f := m.entry(); f != nil {
		m.a.remove(f)
		m.a.recompute()
	}
}

// Share is the rate in bytes/s at which connection id may send. It is the
// water level for a sender, and the whole capacity for one not sending yet.
func (a *Allocator) Share(id uint32) float64 {
	if _, ok := a.flows[id]; !ok {
		return a.p.Capacity
	}
	return a.level
}

// SetCapacity changes the capacity shared. It reports whether the share
// changed.
func (a *Allocator) SetCapacity(c float64) bool {
	a.p.Capacity = c
	for _, f := range a.active {
		f.demand = min(f.demand, c)
	}
	return a.recompute()
}

// Capacity is the capacity shared.
func (a *Allocator) Capacity() float64 { return a.p.Capacity }

// Senders is the number of active senders.
func (a *Allocator) Senders() int { return len(a.flows) }

// expire removes the senders silent for longer than the horizon, or than
// eight of their packets at the level. A sender paced at its share sends a
// packet every bytes/level, and it must not be forgotten between two.
func (a *Allocator) expire(now int64) bool {
	gone := false
	// The walk goes backwards, since a removal moves the last flow, already
	// looked at, into the removed one's place.
	for i := len(a.active) - 1; i >= 0; i-- {
		f := a.active[i]
		quiet := max(int64(a.p.Horizon), int64(8*float64(f.bytes)/a.level*1e9))
		if a.p.Quiet > 0 {
			quiet = int64(a.p.Quiet)
		}
		if now-f.lastSeen > quiet {
			a.remove(f)
			gone = true
		}
	}
	return gone
}

// recompute fills the water level, the largest L with the sum of
// min(demand, L) <= Capacity. Every sender gets L as its hint. One that
// wants less uses less, and the rest is what the others share.
func (a *Allocator) recompute() bool {
	a.demands = a.demands[:0]
	for _, f := range a.active {
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
	// Everyone wants less than an equal share. The level is what the
	// largest could take on top of what the others use.
	return max(left+demands[len(demands)-1], demands[len(demands)-1])
}
