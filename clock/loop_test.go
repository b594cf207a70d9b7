package clock

import (
	"context"
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
