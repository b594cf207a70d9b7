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
