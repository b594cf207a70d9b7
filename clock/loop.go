package clock

import (
	"context"
	"sync"
	"time"
)

// Loop runs a Sim against the wall clock. Events fire when their time
// comes, or at once if the loop is behind, and other goroutines hand work to
// the loop with Post. Everything scheduled on the loop, and every posted
// function, runs on the goroutine that called Run, one at a time. The same
// single-threaded protocol and emulator code that runs in virtual time
// therefore runs here unchanged. Times are nanoseconds since NewLoop.
type Loop struct {
	sim     Sim
	origin  time.Time
	turnEnd []func() // loop goroutine only
	// inputFirst runs each turn's posted work before the events that fell
	// due, and shows all of them the turn's wall time (NewEndpointLoop).
	// turnNow is that time, loop goroutine only.
	inputFirst bool
	turnNow    Time
	// The longest lateness of the current lateWindow, which began at
	// lateFrom, and of the one before it (see Late). Loop goroutine only.
	late, latePrev time.Duration
	lateFrom       Time

	mu     sync.Mutex
	posted []func()
	wake   chan struct{}
}

// NewLoop returns a loop whose clock starts now. A loop that falls behind
// fires the events that fell due one after another, each at its own time,
// as a Sim does. An emulator needs that: its links keep their schedule
// however late the host ran them.
func NewLoop() *Loop {
	return &Loop{origin: time.Now(), wake: make(chan struct{}, 1)}
}

// NewEndpointLoop returns a loop for a protocol endpoint on real sockets.
// Each turn runs the work posted since the last one, the datagrams the
// socket readers handed over, before the events that fell due. Posted work
// and events alike see the wall time at the start of the turn.
//
// A host that did not run the loop for a while (a busy machine, a pause)
// thus shows a timer the acknowledgments that came in meanwhile before the
// timer decides that something was lost. And a loop that wakes late does
// not replay the time it missed event by event: a timer that re-arms
// itself from a late firing is due after the turn, not again within it.
func NewEndpointLoop() *Loop {
	l := NewLoop()
	l.inputFirst = true
	return l
}

// Now is the loop's time. On the loop goroutine it is the time of the event
// being run, which may be slightly behind the wall clock; on an endpoint's
// loop it is the time the turn began. It must not be called from other
// goroutines.
func (l *Loop) Now() Time { return max(l.sim.Now(), l.turnNow) }

// At schedules ev at time t. Loop goroutine only.
func (l *Loop) At(t Time, ev Event) { l.sim.At(t, ev) }

// NewTimer makes a timer on the loop. Loop goroutine only.
func (l *Loop) NewTimer(fire func()) Timer { return l.sim.NewTimer(fire) }

// Post runs f on the loop goroutine as soon as it can. Safe from any goroutine.
func (l *Loop) Post(f func()) {
	l.mu.Lock()
	l.posted = append(l.posted, f)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// AtTurnEnd makes the loop call f on its goroutine at the end of every
// turn. A turn ends after the events that were due and the functions posted
// by then have run, before the loop looks for more. A port that holds what
// is sent during a turn and sends it in fewer, larger system calls flushes
// there. AtTurnEnd is safe from any goroutine. The registration is posted,
// so f is in place once the loop has run it.
func (l *Loop) AtTurnEnd(f func()) {
	l.Post(func() { l.turnEnd = append(l.turnEnd, f) })
}

// lateWindow is how long one window of the lateness measure lasts. Late
// reports the longest of the current window and the one before it, so a
// delay counts for one to two windows.
const lateWindow = time.Second

// Late is the longest time an event waited past its due time, in the
// current lateWindow and the one before it. It is what the host's
// scheduling added to the loop's timers: on a busy machine, tens of
// milliseconds. Loop goroutine only.
func (l *Loop) Late() time.Duration { return max(l.late, l.latePrev) }

// noteLate records, at the start of a turn at now, how late the earliest
// event due was.
func (l *Loop) noteLate(now Time) {
	if d := now.Sub(l.lateFrom); d >= lateWindow {
		l.latePrev = l.late
		if d >= 2*lateWindow {
			l.latePrev = 0 // a whole window passed without a turn
		}
		l.late, l.lateFrom = 0, now
	}
	if next := l.sim.Next(); next < now {
		l.late = max(l.late, now.Sub(next))
	}
}

// wallNow is the wall clock on the loop's time scale.
func (l *Loop) wallNow() Time { return Time(time.Since(l.origin)) }

// Run runs the loop until ctx is done. It returns ctx.Err().
func (l *Loop) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var batch []func()
	for {
		now := l.wallNow()
		l.noteLate(now)
		if l.inputFirst {
			l.turnNow = now
		} else {
			l.sim.RunUntil(now)
		}
		l.mu.Lock()
		batch, l.posted = l.posted, batch[:0]
		l.mu.Unlock()
		for i, f := range batch {
			f()
			batch[i] = nil
		}
		if l.inputFirst {
			l.sim.RunUntil(now)
		}
		for _, f := range l.turnEnd {
			f()
		}
		if len(batch) > 0 {
			continue // posted work may have scheduled events that are due
		}
		wait := time.Hour
		if next := l.sim.Next(); next != Never {
			wait = time.Duration(next - l.wallNow())
		}
		if wait <= 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.wake:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}
