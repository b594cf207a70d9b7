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
	events calendar    // one-shot events, by (at, seq)
	timers []*SimTimer // armed timers: a min-heap by (at, seq), indexed for Reset/Stop
	fired  uint64
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
func (s *Sim) Pending() int { return s.events.len() + len(s.timers) }

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
	if e, ok := s.events.peek(s.now); ok {
		next = e.at
	}
	if len(s.timers) > 0 && s.timers[0].at < next {
		next = s.timers[0].at
	}
	return next
}

// Step fires the next event or timer, advancing the clock to its time. It
// reports false when nothing is scheduled.
func (s *Sim) Step() bool {
	next, haveEvent := s.events.peek(s.now)
	useTimer := len(s.timers) > 0 && (!haveEvent || s.timers[0].before(next.at, next.seq))
	switch {
	case useTimer:
		t := s.timers[0]
		s.removeTimer(0)
		s.now = t.at
		s.fired++
		t.fire()
	case haveEvent:
		e := s.events.pop(s.now)
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
	for s.Next() <= end {
		s.Step()
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
	at    Time
	seq   uint64
	index int // position in sim.timers, -1 when stopped
}

// NewTimer makes a stopped timer that calls fire on expiry.
func (s *Sim) NewTimer(fire func()) Timer {
	return &SimTimer{sim: s, fire: fire, index: -1}
}

func (t *SimTimer) before(at Time, seq uint64) bool {
	return t.at < at || t.at == at && t.seq < seq
}

// Reset arms the timer for time at.
func (t *SimTimer) Reset(at Time) {
	s := t.sim
	if at < s.now {
		at = s.now
	}
	s.seq++
	t.at, t.seq = at, s.seq
	if t.index < 0 {
		t.index = len(s.timers)
		s.timers = append(s.timers, t)
		s.timerUp(t.index)
		return
	}
	s.timerUp(t.index)
	s.timerDown(t.index)
}

// Stop disarms the timer.
func (t *SimTimer) Stop() bool {
	if t.index < 0 {
		return false
	}
	t.sim.removeTimer(t.index)
	return true
}

// Deadline is when the timer fires, or Never.
func (t *SimTimer) Deadline() Time {
	if t.index < 0 {
		return Never
	}
	return t.at
}

func (s *Sim) removeTimer(i int) {
	h := s.timers
	last := len(h) - 1
	h[i].index = -1
	if i != last {
		h[i] = h[last]
		h[i].index = i
	}
	h[last] = nil
	s.timers = h[:last]
	if i < last {
		s.timerUp(i)
		s.timerDown(i)
	}
}

func (s *Sim) timerUp(i int) {
	h := s.timers
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(h[p].at, h[p].seq) {
			break
		}
		h[i], h[p] = h[p], h[i]
		h[i].index, h[p].index = i, p
		i = p
	}
}

func (s *Sim) timerDown(i int) {
	h := s.timers
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].before(h[l].at, h[l].seq) {
			m = r
		}
		if !h[m].before(h[i].at, h[i].seq) {
			return
		}
		h[i], h[m] = h[m], h[i]
		h[i].index, h[m].index = i, m
		i = m
	}
}
