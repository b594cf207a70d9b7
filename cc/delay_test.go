package cc

import (
	"math"
	"testing"
	"time"
)

const us = time.Microsecond

// delayWindow is a window of w packets with the default delay signal, whose
// rounds are one PSN long: each OnAck ends one.
func delayWindow(w float64) (*Window, *uint32) {
	p := DefaultWindow
	p.Initial, p.Max = w, 255
	psn := uint32(0)
	return NewWindow(p, 1), &psn
}

// round gives the window one round: its samples of queue at rtt (least RTT
// 10 µs), then an ACK of one packet that ends the round. It reports
// whether the delay signal cut.
func round(w *Window, psn *uint32, queues ...time.Duration) bool {
	for _, q := range queues {
		w.OnDelay(q, 10*us+q, 10*us)
	}
	*psn++
	return w.OnAck(1, 0, *psn, *psn+1)
}

// A round acts on its least sample: one packet that met the queue alone is
// not a queue.
func TestDelayRoundTakesItsLeastSample(t *testing.T) {
	w, psn := delayWindow(32)
	if round(w, psn, 200*us, 5*us, 300*us) {
		t.Fatalf("cut for a round whose least sample was 5 µs")
	}
	if w.Value() <= 32 {
		t.Fatalf("window %v did not grow below the target", w.Value())
	}
}

// Above the target the cut is Beta x (queue - target) / RTT, Swift's rule,
// and the next round does not grow the window.
func TestDelayCutsInProportionToTheExcess(t *testing.T) {
	w, psn := delayWindow(32)
	before := w.Value()
	// The ACK of the round grows the window first, by 1/W.
	grown := before + 1/before
	target := w.target()
	queue := target + 20*us
	if !round(w, psn, queue) {
		t.Fatalf("no cut at %v, target %v", queue, target)
	}
	want := grown * (1 - 0.8*float64(20*us)/float64(10*us+queue))
	if !near(w.Value(), want) {
		t.Fatalf("window %v after the cut, want %v", w.Value(), want)
	}
	// The next ACK, before its round ends, does not grow the window: the
	// last round showed a queue.
	w.OnAck(1, 0, *psn, *psn+2)
	if !near(w.Value(), want) {
		t.Fatalf("window grew to %v after a round above the target", w.Value())
	}
	// One cut is at most MaxCut.
	w, psn = delayWindow(32)
	round(w, psn, 10*time.Millisecond)
	if w.Value() < (32+1.0/32)*0.5-1e-9 {
		t.Fatalf("a cut took %v, more than half of 32", w.Value())
	}
}

// The target is never below the least RTT, and it grows as the window
// falls: twice as much at one packet as at 16 or more.
func TestDelayTargetScales(t *testing.T) {
	w, _ := delayWindow(32)
	w.OnDelay(0, 10*us, 10*us)
	if got := w.target(); got != 25*us {
		t.Fatalf("target at W=32: %v, want 25µs", got)
	}
	w.OnDelay(0, 40*us, 40*us)
	if got := w.target(); got != 40*us {
		t.Fatalf("target with a least RTT of 40 µs: %v, want 40µs", got)
	}
	w.w = 1
	if got := w.target(); got != 80*us {
		t.Fatalf("target at W=1: %v, want 80µs", got)
	}
	w.w = 4
	third := 1.0 / 3
	if got, want := w.target(), 40*us+time.Duration(float64(40*us)*third); got != want {
		t.Fatalf("target at W=4: %v, want %v", got, want)
	}
}

// A queue that the path's cuts do not bring down, HeldRounds rounds in a row
// above one and a half targets, is taken for others': the path stops
// cutting, and starts again once a round's queue is at the target.
func TestDelayYieldsToAQueueItCannotDrain(t *testing.T) {
	w, psn := delayWindow(200)
	cuts := 0
	for i := 0; i < 40; i++ {
		if round(w, psn, 3*w.target()) {
			cuts++
		}
	}
	if cuts != DefaultDelay.HeldRounds || !w.delay.foreign {
		t.Fatalf("%d cuts, yielding %v; want %d and yielding", cuts, w.delay.foreign, DefaultDelay.HeldRounds)
	}
	low := w.Value()
	for i := 0; i < 10; i++ {
		round(w, psn, 3*w.target())
	}
	if w.Value() <= low {
		t.Fatalf("a yielding path's window did not grow: %v", w.Value())
	}
	// The queue drains: the path takes the signal again.
	round(w, psn, w.target()/2)
	if w.delay.foreign {
		t.Fatalf("still yielding after a round at the target")
	}
	if !round(w, psn, 3*w.target()) {
		t.Fatalf("no cut after the signal came back")
	}
	// A queue that stays just above the target, as one that yielding
	// senders hold, is cut for as long as it stands.
	w, psn = delayWindow(200)
	for i := 0; i < 40; i++ {
		if !round(w, psn, w.target()*5/4) {
			t.Fatalf("round %d: no cut at 1.25 targets", i)
		}
	}
	if w.delay.foreign {
		t.Fatalf("yielding to a queue of 1.25 targets")
	}
}

// With a target of 0 the signal is off, and NoDelay drops a round's
// samples.
func TestDelayOff(t *testing.T) {
	p := DefaultWindow
	p.Delay.Target = 0
	w := NewWindow(p, 1)
	psn := uint32(0)
	if round(w, &psn, time.Millisecond) || w.QueueSeen() {
		t.Fatalf("a window without the signal cut or saw a queue")
	}
	w, ps := delayWindow(32)
	w.OnDelay(time.Millisecond, time.Millisecond, 10*us)
	if !w.QueueSeen() {
		t.Fatalf("a sample of 1 ms above a target of 25 µs was not seen")
	}
	w.NoDelay()
	*ps++
	if w.OnAck(1, 0, *ps, *ps+1) {
		t.Fatalf("cut from samples NoDelay dropped")
	}
}

// The base is the least reading, across the wrap of the 32-bit clock.
func TestDelayBase(t *testing.T) {
	var b DelayBase
	start := uint32(math.MaxUint32 - 1000) // wraps within the test
	if q := b.Queue(start); q != 0 {
		t.Fatalf("first reading: %v", q)
	}
	if q := b.Queue(start + 5000); q != 5*us {
		t.Fatalf("5 µs above the base across the wrap: %v", q)
	}
	if q := b.Queue(start - 2000); q != 0 {
		t.Fatalf("a new least: %v", q)
	}
	if q := b.Queue(start + 1000); q != 3*us {
		t.Fatalf("over the new least: %v, want 3µs", q)
	}
}
