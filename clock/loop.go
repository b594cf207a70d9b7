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

	mu     sync.Mutex
	posted []func()
	wake   chan struct{}
}

// NewLoop returns a loop whose clock starts now.
func NewLoop() *Loop {
	return &Loop{origin: time.Now(), wake: make(chan struct{}, 1)}
}

// Now is the loop's time. On the loop goroutine it is the time of the event
// being run, which may be slightly behind the wall clock. It must not be
// called from other goroutines.
func (l *Loop) Now() Time { return l.sim.Now() }

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

// wallNow is the wall clock on the loop's time scale.
func (l *Loop) wallNow() Time { return Time(time.Since(l.origin)) }

// Run runs the loop until ctx is done. It returns ctx.Err().
func (l *Loop) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var batch []func()
	for {
		now := l.wallNow()
		l.sim.RunUntil(now)
		l.mu.Lock()
		batch, l.posted = l.posted, batch[:0]
		l.mu.Unlock()
		for i, f := range batch {
			f()
			batch[i] = nil
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
