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
type Sim struct {
	now    Time
	seq    uint64
	events calendar     // one-shot events, by (at, seq)
	timers []timerEntry // a 4-ary min-heap by (at, seq), at most one entry a timer
	armed  int          // timers armed
	fired  uint64
}

// timerEntry is a timer's place in the heap. Its key is the timer's
// deadline or earlier: a timer moved to a later deadline (a retransmission
// timer pushed back by every acknowledgment: most Resets) or stopped keeps
// its entry where it is, and the entry is moved or dropped only when it
// comes to the top. A Reset that postpones or a Stop then costs O(1), not
// two walks of a heap of tens of thousands of timers, and timers still
// fire in order of (deadline, sequence) exactly as with an exact heap.
type timerEntry struct {
	at  Time
	seq uint64
	t   *SimTimer
}

func (a *timerEntry) less(b *timerEntry) bool {
	return a.at < b.at || a.at == b.at && a.seq < b.seq
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
func (s *Sim) Pending() int { return s.events.len() + s.armed }

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
	next := Never
	if e, where := s.events.peek(s.now); where != noneAt {
		next = e.at
	}
	s.settleTimers()
	if len(s.timers) > 0 && s.timers[0].at < next {
		next = s.timers[0].at
	}
	return next
}

// Step fires the next event or timer, advancing the clock to its time. It
// reports false when nothing is scheduled.
func (s *Sim) Step() bool { return s.StepUntil(Never) }

// StepUntil is Step for an event or timer due at or before end: it reports
// false, firing nothing, when the next one is later or there is none. (It
// is Next and Step in one look at the queues: what a run to a deadline
// does once per event.)
func (s *Sim) StepUntil(end Time) bool {
	next, where := s.events.peek(s.now)
	s.settleTimers()
	useTimer := len(s.timers) > 0 && (where == noneAt || s.timers[0].less(&timerEntry{at: next.at, seq: next.seq}))
	switch {
	case useTimer:
		if s.timers[0].at > end {
			return false
		}
		// The entry stays on top while the timer fires (its key is now,
		// below anything the callback can arm) and settleTimers drops it
		// or, when the callback re-armed the timer (a pacer's next
		// packet), moves it down from the top: one walk of the heap, not a
		// pop and a push.
		t := s.timers[0].t
		t.armed = false
		s.armed--
		s.now = t.at
		s.fired++
		t.fire()
	case where != noneAt:
		if next.at > end {
			return false
		}
		e := s.events.take(where)
		s.now = e.at
		s.fired++
		e.ev.Fire()
	default:
		return false
	}
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
	fire  func()
	at    Time // the deadline, when armed
	seq   uint64
	armed bool
	index int // position of its entry in sim.timers, -1 when it has none
}

// NewTimer makes a stopped timer that calls fire on expiry.
func (s *Sim) NewTimer(fire func()) Timer {
	return &SimTimer{sim: s, fire: fire, index: -1}
}

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
	switch {
	case t.index < 0:
		s.timers = append(s.timers, timerEntry{at, t.seq, t})
		s.timerUp(len(s.timers) - 1)
	case at < s.timers[t.index].at:
		e := &s.timers[t.index]
		e.at, e.seq = at, t.seq
		s.timerUp(t.index)
	}
	// Otherwise the entry is early: settleTimers moves it when it comes up.
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

// settleTimers makes the top of the heap an armed timer's entry at its
// deadline: it drops the entries of stopped timers and moves those of
// postponed ones to their deadlines, until the top is exact (or the heap
// is empty). Entries below the top may still be early; none is late.
func (s *Sim) settleTimers() {
	for len(s.timers) > 0 {
		e := &s.timers[0]
		t := e.t
		switch {
		case !t.armed:
			s.popTimer()
		case e.at == t.at && e.seq == t.seq:
			return
		default:
			e.at, e.seq = t.at, t.seq
			s.timerDown(0)
		}
	}
}

// popTimer removes the top entry.
func (s *Sim) popTimer() {
	h := s.timers
	h[0].t.index = -1
	last := len(h) - 1
	h[0] = h[last]
	h[last] = timerEntry{}
	s.timers = h[:last]
	if last > 0 {
		s.timerDown(0)
	}
}

// The timer heap is 4-ary, as the calendar's far heap: half the depth of a
// binary heap. Keys are in the entries, so comparisons do not visit the
// timers.

func (s *Sim) timerUp(i int) {
	h := s.timers
	e := h[i]
	for i > 0 {
		p := (i - 1) / 4
		if !e.less(&h[p]) {
			break
		}
		h[i] = h[p]
		h[i].t.index = i
		i = p
	}
	h[i] = e
	e.t.index = i
}

func (s *Sim) timerDown(i int) {
	h := s.timers
	n := len(h)
	e := h[i]
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < min(c+4, n); j++ {
			if h[j].less(&h[m]) {
				m = j
			}
		}
		if !h[m].less(&e) {
			break
		}
		h[i] = h[m]
		h[i].t.index = i
		i = m
	}
	h[i] = e
	e.t.index = i
}
