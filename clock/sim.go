package clock

import (
	"math/bits"
	"time"
)

// Event is something scheduled on a Sim that fires once, such as a packet
// finishing its serialization on a link. The caller owns the Event, so
// scheduling one never allocates and the emulator's cost per packet stays
// flat.
type Event interface {
	Fire()
}

// Sim is a discrete-event loop in virtual time. Events and timers fire in
// order of time, then of scheduling, so two runs that schedule the same
// things in the same order fire them in the same order. Runs are therefore
// deterministic. Sim is not safe for concurrent use. One goroutine drives
// it, and every callback runs on that goroutine.
//
// Timers share the events' queue. An armed timer has an entry there, keyed
// by its deadline or earlier. Most Resets move a timer to a later deadline,
// as when every acknowledgment pushes back a retransmission timer. Such a
// timer, or a stopped one, keeps its entry where it is. The entry is put
// back at the deadline, or dropped, only when it comes up. A Reset that
// postpones and a Stop therefore cost O(1). A Reset to an earlier deadline
// pushes a new entry and leaves the old one to be dropped when it comes up.
// Timers still fire in order of deadline and sequence with the events,
// exactly as with an exact queue.
type Sim struct {
	now    Time
	seq    uint64   // the last scheduling's sequence number
	events calendar // events and timer entries, by time and sequence
	fired  uint64

	timerEntries int // timer entries in events, live or stale
	armed        int // timers armed
}

type eventEntry struct {
	at  Time
	seq uint64
	ev  Event
}

// NewSim returns a loop whose clock starts at 0.
func NewSim() *Sim { return &Sim{} }

// NewSimBuckets returns a loop whose clock starts at 0 and whose calendar
// has n buckets of width nanoseconds each. Both must be powers of two.
// NewSim's calendar has 65,536 buckets of 1 ns. A loop whose events are
// sparse, such as one host's in a parallel run, keeps a smaller calendar in
// the core's caches with fewer, wider buckets.
func NewSimBuckets(n int, width Time) *Sim {
	if n < 64 || n&(n-1) != 0 || width <= 0 || width&(width-1) != 0 {
		panic("clock: calendar buckets and their width must be powers of two")
	}
	s := &Sim{}
	s.events.mask, s.events.shift = n-1, uint(bits.TrailingZeros64(uint64(width)))
	return s
}

// Now is the current virtual time.
func (s *Sim) Now() Time { return s.now }

// Fired counts the events and timers fired so far.
func (s *Sim) Fired() uint64 { return s.fired }

// Pending counts scheduled events and armed timers.
func (s *Sim) Pending() int { return s.events.len() - s.timerEntries + s.armed }

// At schedules ev to fire at time at (now, if at is in the past).
func (s *Sim) At(at Time, ev Event) {
	if at < s.now {
		at = s.now
	}
	s.seq++
	s.events.push(eventEntry{at, s.seq, ev}, s.now)
}

// After schedules ev to fire d from now.
func (s *Sim) After(d time.Duration, ev Event) { s.At(s.now.Add(d), ev) }

// Next returns the time of the next event or timer, or Never.
func (s *Sim) Next() Time {
	if e, where := s.peek(); where != noneAt {
		return e.at
	}
	return Never
}

// peek returns the queue's first entry that fires. Stale timer entries
// ahead of it are dropped first, and early entries of postponed timers are
// put back at their deadlines.
func (s *Sim) peek() (eventEntry, int) {
	for {
		e, where := s.events.peek(s.now)
		if where == noneAt {
			return e, where
		}
		m, ok := e.ev.(*timerMark)
		if !ok {
			return e, where
		}
		t := (*SimTimer)(m)
		if t.armed && e.seq == t.qSeq && t.qSeq == t.seq {
			return e, where // the live entry, at its deadline
		}
		s.events.take(where)
		s.timerEntries--
		if e.seq == t.qSeq { // the live entry of a postponed or stopped timer
			t.queued = false
			if t.armed {
				s.pushTimer(t)
			}
		}
	}
}

// Step fires the next event or timer, advancing the clock to its time. It
// reports false when nothing is scheduled.
func (s *Sim) Step() bool { return s.StepUntil(Never) }

// StepUntil is Step for an event or timer due at or before end. It reports
// false and fires nothing when the next one is later or there is none. It
// does Next and Step in one look at the queue, which a run to a deadline
// does once per event.
func (s *Sim) StepUntil(end Time) bool {
	next, where := s.peek()
	if where == noneAt || next.at > end {
		return false
	}
	e := s.events.take(where)
	s.now = e.at
	s.fired++
	if m, ok := e.ev.(*timerMark); ok {
		t := (*SimTimer)(m)
		s.timerEntries--
		t.queued, t.armed = false, false
		s.armed--
		t.ev.Fire()
		return true
	}
	e.ev.Fire()
	return true
}

// RunUntil fires everything scheduled up to and including time end, then
// sets the clock to end.
func (s *Sim) RunUntil(end Time) {
	for s.StepUntil(end) {
	}
	if end > s.now {
		s.now = end
	}
}

// RunFor runs for d of virtual time.
func (s *Sim) RunFor(d time.Duration) { s.RunUntil(s.now.Add(d)) }

// RunWhile fires events while cond() holds and something is scheduled. It
// reports whether cond still holds, which is true when the loop ran dry
// first.
func (s *Sim) RunWhile(cond func() bool) bool {
	for cond() {
		if !s.Step() {
			return true
		}
	}
	return false
}

func (a eventEntry) less(b eventEntry) bool {
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

// SimTimer is a Timer on a Sim.
type SimTimer struct {
	sim   *Sim
	ev    Event // fired on expiry
	armed bool
	at    Time   // the deadline, when armed
	seq   uint64 // the sequence of the last Reset

	// queued says the timer's live entry is in the queue, with sequence
	// qSeq at time qAt, at or before the deadline. Other entries of the
	// timer there are stale.
	queued bool
	qAt    Time
	qSeq   uint64
}

// timerMark is a SimTimer as the queue holds it. The Sim recognizes the
// entry and fires the timer itself.
type timerMark SimTimer

func (*timerMark) Fire() { panic("clock: a timer entry fired as an event") }

// Func is a function as an Event. A timer made with NewTimer fires one, and
// so does anything scheduled once with no object of its own to fire.
type Func func()

func (f Func) Fire() { f() }

// NewTimer makes a stopped timer that calls fire on expiry.
func (s *Sim) NewTimer(fire func()) Timer { return &SimTimer{sim: s, ev: Func(fire)} }

// Reset arms the timer for time at.
func (t *SimTimer) Reset(at Time) {
	s := t.sim
	if at < s.now {
		at = s.now
	}
	s.seq++
	if !t.armed {
		s.armed++
	}
	t.at, t.seq, t.armed = at, s.seq, true
	if !t.queued || at < t.qAt {
		s.pushTimer(t)
	}
	// Otherwise the live entry is early, and peek puts it back when it comes up.
}

// pushTimer queues a live entry of t at its deadline.
func (s *Sim) pushTimer(t *SimTimer) {
	t.queued, t.qAt, t.qSeq = true, t.at, t.seq
	s.timerEntries++
	s.events.push(eventEntry{t.at, t.seq, (*timerMark)(t)}, s.now)
}

// Stop disarms the timer. Its entry is dropped when it comes up.
func (t *SimTimer) Stop() bool {
	if !t.armed {
		return false
	}
	t.armed = false
	t.sim.armed--
	return true
}

// Deadline is when the timer fires, or Never.
func (t *SimTimer) Deadline() Time {
	if !t.armed {
		return Never
	}
	return t.at
}
