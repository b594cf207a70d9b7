package clock

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// Posted work and events run on the loop, events no earlier than their time.
func TestLoopRunsPostedWorkAndEvents(t *testing.T) {
	l := NewLoop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()

	var firedAt atomic.Int64
	scheduled := make(chan Time)
	l.Post(func() {
		start := l.Now()
		l.NewTimer(func() { firedAt.Store(int64(l.wallNow())); cancel() }).Reset(start.Add(20 * time.Millisecond))
		scheduled <- start
	})
	start := <-scheduled
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the timer never fired")
	}
	if got := Time(firedAt.Load()); got < start.Add(20*time.Millisecond) {
		t.Fatalf("a timer for %v fired at %v", start.Add(20*time.Millisecond), got)
	}
}

// A turn-end function runs after the work of each turn. Everything posted
// together runs first, then the turn-end function once.
func TestLoopRunsTurnEndAfterTheTurnsWork(t *testing.T) {
	l := NewLoop()
	var log []string
	l.AtTurnEnd(func() {
		if len(log) > 0 && log[len(log)-1] != "end" {
			log = append(log, "end")
		}
	})
	// Posted before Run starts, the registration and all three run in the
	// loop's first turn.
	for _, s := range []string{"a", "b", "c"} {
		l.Post(func() { log = append(log, s) })
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	sync := make(chan struct{})
	l.Post(func() { close(sync) })
	<-sync
	l.Post(func() { log = append(log, "d"); cancel() })
	<-done
	got := ""
	for _, s := range log {
		got += s + " "
	}
	if got != "a b c end d end " {
		t.Fatalf("order %q, want a b c end d end", got)
	}
}

// runLoop starts an endpoint's loop, or a plain one, on a goroutine of its
// own. Run's error arrives on done once cancel is called.
func runLoop(endpoint bool) (*Loop, context.CancelFunc, chan error) {
	l := NewLoop()
	if endpoint {
		l = NewEndpointLoop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	return l, cancel, done
}

// On an endpoint's loop, work posted while the loop was held up runs before
// a timer that fell due meanwhile, and the timer sees the time it actually
// runs at. A plain loop keeps the Sim's order and times instead.
func TestEndpointLoopRunsInputBeforeLateTimers(t *testing.T) {
	for _, endpoint := range []bool{true, false} {
		l, cancel, done := runLoop(endpoint)
		var order []string
		var start, due, firedAt Time
		l.Post(func() {
			start = l.Now()
			due = start.Add(time.Millisecond)
			l.NewTimer(func() { order = append(order, "timer"); firedAt = l.Now() }).Reset(due)
			time.Sleep(30 * time.Millisecond) // the host does not run the loop
			l.Post(func() { order = append(order, "input") })
			l.Post(func() {}) // a turn later, both have run
			l.Post(cancel)
		})
		<-done
		got := fmt.Sprint(order)
		switch {
		case endpoint && got != "[input timer]":
			t.Fatalf("endpoint loop ran %v, want the input first", got)
		case endpoint && firedAt < start.Add(30*time.Millisecond):
			t.Fatalf("endpoint loop: the late timer saw %v, before the %v it ran at", firedAt, start.Add(30*time.Millisecond))
		case !endpoint && (got != "[timer input]" || firedAt != due):
			t.Fatalf("plain loop ran %v, the timer at %v; want the timer first at its own time %v", got, firedAt, due)
		}
	}
}

// A timer that re-arms itself from a late firing is due after the turn it
// ran in, on an endpoint's loop: it does not replay, within one turn, the
// firings the host's stall made it miss. A plain loop replays them.
func TestEndpointLoopDoesNotReplayALateTimer(t *testing.T) {
	for _, endpoint := range []bool{true, false} {
		l, cancel, done := runLoop(endpoint)
		var walls []time.Duration // the wall time of each firing
		l.Post(func() {
			var tm Timer
			tm = l.NewTimer(func() {
				walls = append(walls, time.Since(l.origin))
				if len(walls) == 40 {
					cancel()
					return
				}
				tm.Reset(l.Now().Add(time.Millisecond))
			})
			tm.Reset(l.Now().Add(time.Millisecond))
			time.Sleep(30 * time.Millisecond) // the host does not run the loop
		})
		<-done
		burst := 0 // firings within a millisecond of the first, one turn's worth
		for _, w := range walls {
			if w-walls[0] < time.Millisecond {
				burst++
			}
		}
		switch {
		case endpoint && burst != 1:
			t.Errorf("endpoint loop: %d firings in the turn after the stall, want 1", burst)
		case !endpoint && burst < 20:
			t.Errorf("plain loop: %d firings in the turn after the stall; it replays about 30", burst)
		}
	}
}

// A loop that runs an event late says by how much: Late is at least the
// time the event waited past its due time.
func TestLoopMeasuresLateness(t *testing.T) {
	l := NewEndpointLoop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Run(ctx) }()
	var late time.Duration
	l.Post(func() {
		if l.Late() != 0 {
			t.Errorf("a new loop is %v late", l.Late())
		}
		l.NewTimer(func() { late = l.Late(); cancel() }).Reset(l.Now().Add(time.Millisecond))
		time.Sleep(30 * time.Millisecond) // the timer falls 29 ms behind
	})
	<-done
	if late < 29*time.Millisecond {
		t.Fatalf("Late is %v after a timer ran 29 ms late", late)
	}
}

// BenchmarkGoTimerLateness measures how late a Go timer fires for a short
// wait. The loop sleeps on one between events, and docs/udp.md sets the
// timers of real sockets above this lateness. Run it with
// go test ./clock -run '^$' -bench GoTimerLateness.
func BenchmarkGoTimerLateness(b *testing.B) {
	const wait = 100 * time.Microsecond
	tm := time.NewTimer(time.Hour)
	defer tm.Stop()
	var sum, worst time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		tm.Reset(wait)
		<-tm.C
		late := time.Since(start) - wait
		sum += late
		worst = max(worst, late)
	}
	b.ReportMetric(float64(sum.Microseconds())/float64(b.N), "µs-late/op")
	b.ReportMetric(float64(worst.Microseconds()), "µs-worst")
}
