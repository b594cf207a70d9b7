package parallel

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
)

// pinger is an event of process lp. It logs itself, then either stays or
// sends itself on to a random process, a random delay of at least the
// lookahead ahead.
type pinger struct {
	g    *Group
	lp   int
	id   int
	hops int
	rng  *rand.Rand
	logs [][]string
}

func (p *pinger) Fire() {
	s := p.g.LP(p.lp)
	p.logs[p.lp] = append(p.logs[p.lp], fmt.Sprintf("%d@%d", p.id, s.Now()))
	if p.hops--; p.hops == 0 {
		return
	}
	to, d := p.rng.IntN(p.g.Len()), clock.Time(p.rng.IntN(3)*50)
	if to == p.lp {
		s.At(s.Now()+d, p) // a local event, sooner than the lookahead
		return
	}
	from := p.lp
	p.lp = to
	p.g.Send(from, to, s.Now()+100+d, p)
}

// A group's processes exchange events a lookahead ahead. Each process sees
// the same events at the same times in the same order for any number of
// cores, ties between processes included, and every event fires at its
// time.
func TestGroupSameForAnyWorkers(t *testing.T) {
	run := func(workers int) [][]string {
		g := NewGroup(7, 100, workers)
		logs := make([][]string, g.Len())
		for i := range 40 {
			p := &pinger{g: g, lp: i % g.Len(), id: i, hops: 60, rng: rand.New(rand.NewPCG(uint64(i), 9)), logs: logs}
			g.LP(p.lp).At(clock.Time(i%5*10), p) // ties at 0, 10, ... across processes
		}
		for lp := range g.Len() { // beyond a process's calendar window, so in its heap
			far := &pinger{g: g, lp: lp, id: 100 + lp, hops: 1, logs: logs}
			g.LP(lp).At(clock.Time(3*processBuckets*processBucket+lp), far)
		}
		if g.RunWhile(clock.Never, func() bool { return true }) != true {
			t.Fatal("RunWhile reported its condition false")
		}
		return logs
	}
	want := run(1)
	n := 0
	for _, l := range want {
		n += len(l)
	}
	if n != 40*60+7 {
		t.Fatalf("%d events fired, want %d", n, 40*60+7)
	}
	for _, workers := range []int{2, 3, 7, 0} {
		got := run(workers)
		for lp := range want {
			if !slices.Equal(got[lp], want[lp]) {
				t.Fatalf("%d workers: process %d saw %v, one worker %v", workers, lp, got[lp], want[lp])
			}
		}
	}
}

// RunWhile stops between windows once its condition fails, with every
// clock at the window's end. An event for another process sooner than the
// lookahead is refused.
func TestGroupRunWhileAndLookahead(t *testing.T) {
	g := NewGroup(2, 100, 2)
	fired := 0
	ev := clock.Func(func() { fired++ })
	for i := range 10 {
		g.LP(i%2).At(clock.Time(i*100), ev)
	}
	if g.RunWhile(clock.Never, func() bool { return fired < 3 }) {
		t.Fatal("RunWhile reported the condition true")
	}
	if fired != 3 || g.Now() != 299 || g.LP(0).Now() != 299 || g.LP(1).Now() != 299 {
		t.Fatalf("fired %d, group at %v, processes at %v and %v", fired, g.Now(), g.LP(0).Now(), g.LP(1).Now())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("an event 99 ns ahead for another process was accepted")
		}
	}()
	g.Send(0, 1, g.Now()+99, ev)
}

// A process's panic on a helper's core reaches the caller of RunWhile, as
// it does with one worker, and the helpers stop. Once raised, it does not
// come back with the next run.
func TestGroupPanicReachesTheCaller(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two cores")
	}
	g := NewGroup(2, 100, 2)
	// Process 1 panics on the helper. The caller is busy with process 0
	// until process 1's event has started.
	var started atomic.Bool
	g.LP(1).At(10, clock.Func(func() { started.Store(true); panic("boom") }))
	g.LP(0).At(10, clock.Func(func() {
		for deadline := time.Now().Add(10 * time.Second); !started.Load() && time.Now().Before(deadline); {
		}
	}))
	run := func() (p any) {
		defer func() { p = recover() }()
		g.RunWhile(clock.Never, func() bool { return true })
		return nil
	}
	if p := run(); p != "boom" {
		t.Fatalf("recovered %v, want the process's panic", p)
	}
	fired := false
	g.LP(1).At(g.Now()+200, clock.Func(func() { fired = true }))
	if p := run(); p != nil || !fired {
		t.Fatalf("the next run: panic %v, event fired %v", p, fired)
	}
}

// An event for a process that ran past it outside the group is a bug. It
// is not moved to that process's present.
func TestGroupRefusesAProcessRunAlone(t *testing.T) {
	g := NewGroup(2, 100, 1)
	g.LP(1).RunUntil(1000)
	g.Send(0, 1, 100, clock.Func(func() {}))
	defer func() {
		if recover() == nil {
			t.Fatal("an event in a process's past delivered")
		}
	}()
	g.RunWhile(clock.Never, func() bool { return true })
}

// A worker done with its own processes runs what the others have not yet
// started of theirs. Worker 0 owns processes 0 and 2, and process 0's event
// waits for process 2's to have fired. Only worker 1 can have run it while
// worker 0 is busy waiting, so without the stealing the test gives up.
// After every window each process is at the window's end with every event
// due by then fired, so each was run.
func TestGroupWorkerTakesTheOthersProcesses(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two cores")
	}
	g := NewGroup(4, 100, 2)
	due := make([][]clock.Time, g.Len()) // its events' times, by process
	fired := make([]int, g.Len())
	var fired2 atomic.Bool
	timedOut := false
	g.LP(2).At(10, clock.Func(func() { fired[2]++; fired2.Store(true) }))
	g.LP(0).At(10, clock.Func(func() {
		fired[0]++
		deadline := time.Now().Add(10 * time.Second)
		for !fired2.Load() && !timedOut {
			timedOut = time.Now().After(deadline)
		}
	}))
	due[0], due[2] = []clock.Time{10}, []clock.Time{10}
	for lp := range g.Len() { // more windows, with work for every process
		for at := clock.Time(200); at < 1000; at += 150 {
			due[lp] = append(due[lp], at+clock.Time(lp))
			g.LP(lp).At(at+clock.Time(lp), clock.Func(func() { fired[lp]++ }))
		}
	}
	windows := 0
	g.Between(func() {
		windows++
		for lp := range g.Len() {
			n := 0
			for _, at := range due[lp] {
				if at <= g.last {
					n++
				}
			}
			if g.LP(lp).Now() != g.last || fired[lp] < n {
				t.Fatalf("after window %d (to %v) process %d is at %v with %d of its %d events due fired",
					windows, g.last, lp, g.LP(lp).Now(), fired[lp], n)
			}
		}
	})
	g.RunWhile(clock.Never, func() bool { return true })
	if timedOut {
		t.Fatal("process 2 never ran while worker 0 was busy with process 0")
	}
	if windows < 5 {
		t.Fatalf("%d windows, want several", windows)
	}
}

// What was sent to a process in a window is on its calendar before it runs
// in the next, whichever worker runs it. Worker 1 has nothing of its own to
// run, so it takes process 2 from worker 0 while worker 0 is still
// scheduling the many events sent to its processes. An event scheduled
// after its process ran past it would panic, and one lost would not fire.
func TestGroupDeliversBeforeAnotherWorkerRuns(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two cores")
	}
	for round := range 10 {
		g := NewGroup(4, 100, 2)
		const each = 3000
		fired := make([]int, g.Len())
		g.LP(1).At(10, clock.Func(func() {
			for i := range each {
				g.Send(1, 0, 150, clock.Func(func() { fired[0]++ }))
				g.Send(1, 2, 150+clock.Time(i%40), clock.Func(func() { fired[2]++ }))
			}
		}))
		g.RunWhile(clock.Never, func() bool { return true })
		if fired[0] != each || fired[2] != each {
			t.Fatalf("round %d: fired %d and %d of %d events sent to processes 0 and 2", round, fired[0], fired[2], each)
		}
	}
}

// When the caller's process and a helper's panic in the same window, the
// caller's panic is raised, and the helper's does not come back with the
// next run. Here both deliver an event into a process run past it.
func TestGroupPanicsOfOneWindowEndWithIt(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two cores")
	}
	g := NewGroup(4, 100, 2)
	g.LP(1).RunUntil(1000) // worker 1's
	g.LP(2).RunUntil(1000) // worker 0's
	g.Send(0, 1, 100, clock.Func(func() {}))
	g.Send(3, 2, 100, clock.Func(func() {}))
	run := func() (p any) {
		defer func() { p = recover() }()
		g.RunWhile(clock.Never, func() bool { return true })
		return nil
	}
	if p := run(); p == nil {
		t.Fatal("no panic for events delivered into processes' past")
	}
	fired := false
	g.LP(0).At(2000, clock.Func(func() { fired = true }))
	if p := run(); p != nil || !fired {
		t.Fatalf("the next run: panic %v, event fired %v", p, fired)
	}
}
