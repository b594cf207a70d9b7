package clock

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

type recorder struct {
	log *[]string
	tag string
	sim *Sim
}

func (r recorder) Fire() { *r.log = append(*r.log, r.tag+"@"+r.sim.Now().String()) }

func TestSimFiresInTimeThenScheduleOrder(t *testing.T) {
	s := NewSim()
	var log []string
	s.At(20, recorder{&log, "b", s})
	s.At(10, recorder{&log, "a", s})
	s.At(20, recorder{&log, "c", s}) // same time as b, scheduled later, so after b
	tm := s.NewTimer(func() { log = append(log, "timer@"+s.Now().String()) })
	tm.Reset(20) // same time, scheduled after c
	s.At(5, recorder{&log, "early", s})
	s.RunUntil(100)
	want := []string{"early@5ns", "a@10ns", "b@20ns", "c@20ns", "timer@20ns"}
	if !slices.Equal(log, want) {
		t.Fatalf("order %v, want %v", log, want)
	}
	if s.Now() != 100 {
		t.Fatalf("RunUntil(100) left the clock at %v", s.Now())
	}
}

func TestSimTimerResetAndStop(t *testing.T) {
	s := NewSim()
	fired := 0
	tm := s.NewTimer(func() { fired++ })
	if tm.Stop() || tm.Deadline() != Never {
		t.Fatal("a new timer is armed")
	}
	tm.Reset(50)
	tm.Reset(30) // earlier
	if tm.Deadline() != 30 {
		t.Fatalf("deadline %v after Reset(30)", tm.Deadline())
	}
	s.RunUntil(29)
	if fired != 0 {
		t.Fatal("fired early")
	}
	tm.Reset(40) // later again
	s.RunUntil(39)
	if fired != 0 {
		t.Fatal("fired at the replaced deadline")
	}
	s.RunUntil(40)
	if fired != 1 || tm.Deadline() != Never {
		t.Fatalf("fired %d, deadline %v", fired, tm.Deadline())
	}
	tm.Reset(60)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported false")
	}
	s.RunUntil(100)
	if fired != 1 {
		t.Fatal("a stopped timer fired")
	}
	tm.Reset(10) // in the past, so it fires at the next step, at now
	s.Step()
	if fired != 2 || s.Now() != 100 {
		t.Fatalf("past deadline: fired %d at %v", fired, s.Now())
	}
}

// A calendar of wide buckets, as one host's process in a parallel run has.
// Events of different times share a bucket and may come out of order.
const (
	wideBuckets = 1 << 11
	wideBucket  = 32 // ns
	wideSpan    = wideBuckets * wideBucket
)

func newWideSim() *Sim { return NewSimBuckets(wideBuckets, wideBucket) }

// Random schedules, resets and stops are checked against a plain sorted
// list. Narrow spreads keep events inside one calendar bucket or a few.
// Wide spreads put them beyond the calendar's window and across several
// laps of its ring. Both run on NewSim's calendar of 1 ns buckets and on a
// calendar of wide buckets.
func TestSimMatchesReferenceModel(t *testing.T) {
	for _, spread := range []int{50, 3 * calendarSpan} {
		testSimAgainstModel(t, spread, NewSim)
	}
	for _, spread := range []int{20, 200, 3 * wideSpan} {
		testSimAgainstModel(t, spread, newWideSim)
	}
}

func testSimAgainstModel(t *testing.T, spread int, newSim func() *Sim) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		s := newSim()
		type ref struct {
			at  Time
			seq int
			id  int
		}
		var model []ref
		var got []int
		seq := 0
		timers := make([]Timer, 30)
		for i := range timers {
			id := 1000 + i
			timers[i] = s.NewTimer(func() { got = append(got, id) })
		}
		for op := 0; op < 400; op++ {
			seq++
			switch rng.IntN(3) {
			case 0:
				at := s.Now() + Time(rng.IntN(spread))
				id := op
				s.At(at, Func(func() { got = append(got, id) }))
				model = append(model, ref{at, seq, id})
			case 1:
				i := rng.IntN(len(timers))
				at := s.Now() + Time(rng.IntN(spread))
				timers[i].Reset(at)
				model = slices.DeleteFunc(model, func(r ref) bool { return r.id == 1000+i })
				model = append(model, ref{at, seq, 1000 + i})
			case 2:
				i := rng.IntN(len(timers))
				timers[i].Stop()
				model = slices.DeleteFunc(model, func(r ref) bool { return r.id == 1000+i })
			}
			if rng.IntN(4) == 0 {
				end := s.Now() + Time(rng.IntN(spread/2))
				slices.SortFunc(model, func(a, b ref) int {
					if a.at != b.at {
						return int(a.at - b.at)
					}
					return a.seq - b.seq
				})
				var want []int
				for len(model) > 0 && model[0].at <= end {
					want = append(want, model[0].id)
					model = model[1:]
				}
				got = got[:0]
				s.RunUntil(end)
				if !slices.Equal(got, want) {
					t.Fatalf("spread %d seed %d op %d: fired %v, want %v", spread, seed, op, got, want)
				}
			}
		}
	}
}

func TestSimSchedulingAllocatesNothing(t *testing.T) {
	s := NewSim()
	ev := Func(func() {})
	tm := s.NewTimer(func() {})
	for i := 0; i < 100; i++ { // grow the heaps first
		s.At(Time(i), ev)
	}
	s.RunUntil(1000)
	if n := testing.AllocsPerRun(1000, func() {
		s.After(time.Microsecond, ev)
		tm.Reset(s.Now() + 500)
		s.Step()
		s.Step()
	}); n != 0 {
		t.Fatalf("schedule and fire: %.1f allocations", n)
	}
}

func BenchmarkSimEventChurn(b *testing.B) {
	s := NewSim()
	ev := Func(func() {})
	for i := 0; i < 1024; i++ {
		s.At(Time(i), ev)
	}
	for b.Loop() {
		s.After(1024, ev)
		s.Step()
	}
}

// A retransmission timer is pushed back by every acknowledgment, among many
// armed timers. The postponement keeps the timer's entry in the queue, so it
// costs the same with 1,000 or 64,000 timers armed.
func BenchmarkSimTimerPostpone(b *testing.B) {
	for _, n := range []int{1000, 64000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s := NewSim()
			timers := make([]Timer, n)
			for i := range timers {
				timers[i] = s.NewTimer(func() {})
				timers[i].Reset(Time(1_000_000 + i))
			}
			i := 0
			for b.Loop() {
				timers[i%n].Reset(s.Now() + Time(2_000_000+i))
				i++
			}
		})
	}
}

// Events at the edge of the calendar's window, and beyond it by whole laps
// of the ring, fire in time order with near ones.
func TestSimCalendarWindowEdges(t *testing.T) {
	s := NewSim()
	s.RunUntil(12345) // not bucket aligned
	var got []Time
	rec := Func(func() { got = append(got, s.Now()) })
	base := s.Now()
	offsets := []Time{calendarSpan + 1, calendarSpan, calendarSpan - 1, 3, 2 * calendarSpan, calendarSpan - 2, 1, 2*calendarSpan + 2}
	for _, o := range offsets {
		s.At(base+o, rec)
	}
	s.RunUntil(base + 3*calendarSpan)
	want := slices.Clone(offsets)
	slices.Sort(want)
	for i := range want {
		want[i] += base
	}
	if !slices.Equal(got, want) {
		t.Fatalf("fired at %v, want %v", got, want)
	}
}

// The same holds at the window's edge of a calendar of wide buckets. With
// an event in now's bucket, one a whole ring later in the same bucket must
// wait in the far heap, not come up with it.
func TestSimCalendarWindowEdgesOfWideBuckets(t *testing.T) {
	s := newWideSim()
	const bucket, span = wideBucket, wideSpan
	s.RunUntil(7*bucket + 5) // inside a bucket
	var got []Time
	rec := Func(func() { got = append(got, s.Now()) })
	start := s.Now() - 5 // now's bucket
	var want []Time
	at := func(t Time) {
		s.At(t, rec)
		want = append(want, t)
	}
	at(s.Now() + 10) // now's bucket
	for k := Time(-2 * bucket); k <= 2*bucket; k += 3 {
		at(start + span + k) // around a whole ring later
	}
	at(s.Now() + 1000)
	at(start + 2*span + 1)
	s.RunUntil(start + 3*span)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("fired at %v, want %v", got, want)
	}
}

// A timer has one entry in the queue however often it is postponed,
// stopped and armed again later than its entry, and a postponed timer fires
// once, at its last deadline.
func TestSimTimerKeepsOneEntry(t *testing.T) {
	s := NewSim()
	fired := []Time{}
	tm := s.NewTimer(func() { fired = append(fired, s.Now()) })
	for i := 1; i <= 1000; i++ {
		tm.Reset(Time(10 * i)) // later each time
		if i%7 == 0 {
			tm.Stop()
			tm.Reset(Time(10*i - 5)) // armed again, earlier than the last deadline
		}
	}
	if s.timerEntries != 1 || s.events.len() != 1 || s.Pending() != 1 {
		t.Fatalf("%d entries, %d pending for one timer", s.timerEntries, s.Pending())
	}
	s.RunUntil(20000)
	if !slices.Equal(fired, []Time{10000}) || s.Pending() != 0 || s.timerEntries != 0 || s.events.len() != 0 {
		t.Fatalf("fired at %v; %d pending, %d entries left", fired, s.Pending(), s.timerEntries)
	}
}

// A timer armed earlier than its entry, stopped or not, gets a new entry.
// It fires once, before a timer due after it, and the entries it left
// behind are dropped as they come up.
func TestSimTimerMovedEarlier(t *testing.T) {
	s := NewSim()
	var order []string
	a := s.NewTimer(func() { order = append(order, "a@"+s.Now().String()) })
	b := s.NewTimer(func() { order = append(order, "b@"+s.Now().String()) })
	b.Reset(40)
	a.Reset(100)
	a.Reset(50) // earlier than its entry, so the entry moves
	a.Stop()
	a.Reset(30) // stopped, then earlier still
	if s.Pending() != 2 {
		t.Fatalf("%d pending for two timers", s.Pending())
	}
	s.RunUntil(200)
	if !slices.Equal(order, []string{"a@30ns", "b@40ns"}) || s.timerEntries != 0 || s.events.len() != 0 {
		t.Fatalf("fired %v; %d entries left", order, s.events.len())
	}
}

// TestSimStepUntilWithTimersReArmedInCallbacks checks timers that re-arm
// themselves when they fire, as a pacer does, some at once. Among them are
// events, stops, and other timers armed from a callback, whose entries move
// up toward the firing one's while it is still on top. They fire one at a
// time in order of time and arming, as a reference queue says, and
// StepUntil fires nothing due after its end.
func TestSimStepUntilWithTimersReArmedInCallbacks(t *testing.T) {
	type ref struct {
		at  Time
		seq int
		id  int
	}
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := NewSim()
		var model []ref
		seq, fired := 0, -1
		arm := func(at Time, id int) {
			seq++
			model = slices.DeleteFunc(model, func(r ref) bool { return r.id == id })
			model = append(model, ref{at, seq, id})
		}
		timers := make([]Timer, 20)
		for i := range timers {
			id := 1000 + i
			timers[i] = s.NewTimer(func() {
				fired = id
				model = slices.DeleteFunc(model, func(r ref) bool { return r.id == id })
				if rng.IntN(3) > 0 { // re-armed from its own callback, often at once
					at := s.Now() + Time(rng.IntN(3)*rng.IntN(40))
					timers[id-1000].Reset(at)
					arm(at, id)
				}
				if j := rng.IntN(len(timers)); rng.IntN(4) == 0 { // another timer stopped
					timers[j].Stop()
					model = slices.DeleteFunc(model, func(r ref) bool { return r.id == 1000+j })
				}
				if k := rng.IntN(len(timers)); k != id-1000 && rng.IntN(4) == 0 { // another armed sooner, often at once
					at := s.Now() + Time(rng.IntN(2)*rng.IntN(20))
					timers[k].Reset(at)
					arm(at, 1000+k)
				}
			})
		}
		for op := 0; op < 300; op++ {
			if rng.IntN(2) == 0 {
				i := rng.IntN(len(timers))
				at := s.Now() + Time(rng.IntN(100))
				timers[i].Reset(at)
				arm(at, 1000+i)
			} else {
				id, at := op, s.Now()+Time(rng.IntN(100))
				s.At(at, Func(func() { fired = id }))
				seq++
				model = append(model, ref{at, seq, id})
			}
			end := s.Now() + Time(rng.IntN(60))
			for {
				slices.SortFunc(model, func(a, b ref) int {
					if a.at != b.at {
						return int(a.at - b.at)
					}
					return a.seq - b.seq
				})
				due := len(model) > 0 && model[0].at <= end
				want := -1
				if due {
					want = model[0].id
					if want < 1000 {
						model = model[1:] // an event, since a timer's callback updates the model itself
					}
				}
				fired = -1
				if s.StepUntil(end) != due || fired != want {
					t.Fatalf("seed %d op %d: fired %d, want %d (due %v)", seed, op, fired, want, due)
				}
				if !due {
					break
				}
			}
		}
	}
}
