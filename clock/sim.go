package clock

import "time"

// Event is something scheduled on a Sim that fires once, such as a packet
// finishing its serialization on a link. Scheduling an Event never allocates
// (the caller owns it), which keeps the emulator's per-packet cost flat.
type Event interface {
	Fire()
}

// Sim is a discrete-event loop in virtual time. Events and timers fire in
// order of (time, scheduling sequence), so two runs that schedule the same
// things in the same order fire them in the same order: runs are
// deterministic. Sim is not safe for concurrent use: one goroutine drives it,
// and every callback runs on that goroutine.
//
// Timers share the events' queue: an armed timer has an entry there keyed
// by its deadline or earlier. A timer moved to a later deadline (a
// retransmission timer pushed back by every acknowledgment: most Resets)
// or stopped keeps its entry where it is; the entry is put back at the
// deadline, or dropped, only when it comes up. A Reset that postpones or a
// Stop costs O(1), a Reset to an earlier deadline pushes a new entry (the
// old one is dropped when it comes up), and timers still fire in order of
// (deadline, sequence) with the events, exactly as with an exact queue.
type Sim struct {
	now          Time
	seq          uint64
	events       calendar // events and timer entries, by (at, seq)
	timerEntries int      // timer entries in events, live or not
	armed        int      // timers armed
	fired        uint64
}

type eventEntry struct {
	at  Time
	seq uint64
	ev  Event
}

// NewSim returns a loop whose clock starts at 0.
func NewSim() *Sim { return &Sim{} }

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

// peek is the queue's first entry that fires: timer entries ahead of it
// that are stale, or early for a postponed timer, are dropped or put back
// at their timer's deadline first.
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
			return e, where // the live entry, at the deadline
		}
		s.events.take(where)
		s.timerEntries--
		if e.seq == t.qSeq { // the live entry, early or of a stopped timer
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

// StepUntil is Step for an event or timer due at or before end: it reports
// false, firing nothing, when the next one is later or there is none. (It
// is Next and Step in one look at the queue: what a run to a deadline does
// once per event.)
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

// RunWhile fires events while cond() holds and something is scheduled; it
// reports whether cond still holds (false: cond became false; true: the
// loop ran dry first).
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
	at    Time  // the deadline, when armed
	seq   uint64
	armed bool
	// queued: the timer's live entry is in the queue, with sequence
	// qSeq at time qAt (at or before the deadline). Other entries of the
	// timer there are stale.
	queued bool
	qAt    Time
	qSeq   uint64
}

// timerMark is a SimTimer as the queue holds it: an entry the Sim
// recognizes and fires itself.
type timerMark SimTimer

func (*timerMark) Fire() { panic("clock: a timer entry fired as an event") }

// Func is a function as an Event: what a timer made with NewTimer fires,
// and anything scheduled once with no object of its own to fire.
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
	// Otherwise the live entry is early: peek puts it back when it comes up.
}

// pushTimer queues a live entry of t at its deadline.
func (s *Sim) pushTimer(t *SimTimer) {
	t.queued, t.qAt, t.qSeq = true, t.at, t.seq
	s.timerEntries++
	s.events.push(eventEntry{t.at, t.seq, (*timerMark)(t)}, s.now)
}

// Stop disarms the timer. Its entry, if any, is dropped when it comes up.
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
