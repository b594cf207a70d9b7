package clock

import (
	"time"
	"unsafe"

	"github.com/mroce/mroce/internal/prefetch"
)

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
	warming      bool   // SetWarming
	warmed       uint64 // events taken while warming: Warmed
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
	if s.warming && where >= 0 {
		s.warmed++
		s.fetchAhead(where)
	}
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

// SetWarming turns on or off the warming of events before they fire
// (Warmer, fetchAhead): off, as a Sim starts, the loop looks at nothing
// ahead. Warming pays when the events' state does not fit the caches
// (thousands of connections) and costs when it does (tens): a
// simulation that knows which turns it on. It changes no result.
func (s *Sim) SetWarming(on bool) { s.warming = on }

// Warmed counts the events taken while warming, the next ones looked at.
func (s *Sim) Warmed() uint64 { return s.warmed }

// A Warmer is an event that can ask for the memory its Fire will read,
// without waiting for it, in two steps as a chain of pointers is followed:
// Warm(1) runs two events before Fire, its own first line asked for a step
// before that, and asks for the lines its fields point to; Warm(2) runs one
// event before Fire and asks for the lines those point to. (An event that
// is not a Warmer still has its own first line asked for.)
type Warmer interface {
	Warm(step int)
}

// lookAhead is how many events fetchAhead looks ahead: the third's own
// line, the second's first step, the next one's second.
const lookAhead = 3

// fetchAhead asks for the memory the next events will read, the event
// just taken from bucket b firing meanwhile (Warmer). With thousands of
// connections most of an event's time is waiting for its state to come
// from memory, one line after another; this overlaps those waits with the
// work before them.
func (s *Sim) fetchAhead(b int) {
	var next [lookAhead]int32
	n := s.events.ahead(b, next[:])
	nodes := s.events.nodes
	if n > 2 {
		prefetch.Line(dataOf(nodes[next[2]].e.ev))
	}
	if n > 1 {
		warm(nodes[next[1]].e.ev, 1)
	}
	if n > 0 {
		warm(nodes[next[0]].e.ev, 2)
	}
}

func warm(ev Event, step int) {
	switch ev := ev.(type) {
	case *timerMark:
		ev.warm(step)
	case Warmer:
		ev.Warm(step)
	}
}

// dataOf is where an interface value's dynamic value is: for the
// pointers that events are, the object itself.
func dataOf(ev Event) unsafe.Pointer {
	return (*[2]unsafe.Pointer)(unsafe.Pointer(&ev))[1]
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

// warm asks for what the timer's event reads: its object at step 1 (the
// event's own line, or a function's closure), and at step 2 what the event
// asks for at its own first step (Warmer).
func (m *timerMark) warm(step int) {
	if step == 1 {
		prefetch.Line(dataOf(m.ev))
	} else if w, ok := m.ev.(Warmer); ok {
		w.Warm(1)
	}
}

// Func is a function as an Event: what a timer made with NewTimer fires,
// and anything scheduled once with no object of its own to fire.
type Func func()

func (f Func) Fire() { f() }

// NewTimer makes a stopped timer that calls fire on expiry.
func (s *Sim) NewTimer(fire func()) Timer { return s.NewEventTimer(Func(fire)) }

// NewEventTimer makes a stopped timer that fires ev on expiry. Unlike a
// function, an event can be a pointer the caller has anyway (a method set
// on a named type of it) and a Warmer, which the loop warms before it
// fires like any event.
func (s *Sim) NewEventTimer(ev Event) Timer {
	return &SimTimer{sim: s, ev: ev}
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
