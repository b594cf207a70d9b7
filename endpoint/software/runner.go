package software

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/endpoint"
)

// Runner is how the software backend reaches its engine, through the
// goroutine or the simulation that owns the engine's state.
type Runner interface {
	// Do runs f on the engine's goroutine and waits for it. It fails,
	// without running f, once the engine has stopped.
	Do(f func()) error
	// Progress returns once cond holds, or ctx ends. cond runs on the
	// engine's goroutine.
	Progress(ctx context.Context, cond func() bool) error
	// AfterFunc calls f once d has passed on the engine's clock, where f
	// may call Do; never before AfterFunc returns. AfterFunc and stop may
	// be called wherever Do may, and from the engine's goroutine too, and
	// stop reports whether it kept f from running.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// ErrStalled is what waiting in virtual time returns when nothing is left
// to happen and the awaited condition still does not hold.
var ErrStalled = errors.New("software: the simulation has nothing left to do and the condition does not hold")

// Stepper is a simulation's event loop, such as clock.Sim.
type Stepper interface {
	Step() bool
}

// SimRunner runs the engine in virtual time on the caller's goroutine.
// Waiting means running the simulation until the condition holds.
type SimRunner struct {
	Sim Stepper
	// Quiet, when set, reports whether the simulated world has nothing
	// left to do but keep its connections alive. Progress then gives up
	// with ErrStalled, since keep-alives never let the simulation run dry.
	Quiet func() bool
}

// Do runs f at once, as the caller's goroutine is the engine's.
func (r SimRunner) Do(f func()) error {
	f()
	return nil
}

// Progress steps the simulation until cond holds. It returns ErrStalled
// when nothing is left to happen: no event at all, or a quiet world.
func (r SimRunner) Progress(ctx context.Context, cond func() bool) error {
	for i := 0; !cond(); i++ {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("software: %w", err)
			}
			if i > 0 && r.Quiet != nil && r.Quiet() {
				return ErrStalled
			}
		}
		if !r.Sim.Step() {
			return ErrStalled
		}
	}
	return nil
}

// AfterFunc arms a timer of the simulation, in virtual time: Sim must also
// be a clock.Clock, as clock.Sim is. f runs inside a step of the
// simulation, on the caller's goroutine, where Do runs f in place.
func (r SimRunner) AfterFunc(d time.Duration, f func()) func() bool {
	clk, ok := r.Sim.(clock.Clock)
	if !ok {
		panic(fmt.Sprintf("software: SimRunner.AfterFunc: the simulation, a %T, is not a clock.Clock", r.Sim))
	}
	t := clk.NewTimer(f)
	t.Reset(clk.Now().Add(d))
	return t.Stop
}

// ErrStopped is what a runner returns once its engine no longer runs
// because its host was closed. It matches endpoint.ErrClosed.
var ErrStopped = fmt.Errorf("software: the engine has stopped: %w", endpoint.ErrClosed)

// LoopRunner runs the engine in real time on a clock.Loop's goroutine,
// over the UDP driver. Do hands work to the loop and waits for it.
// Progress waits until a condition holds, checked at the end of every
// turn of the loop. Neither may be called from the loop's own goroutine.
// Run runs the loop, and once it returns Do and Progress fail with
// ErrStopped.
type LoopRunner struct {
	loop    *clock.Loop
	waiters []*waiter // loop goroutine only
	stopped chan struct{}
}

type waiter struct {
	cond func() bool
	done chan struct{}
	gone bool // the caller stopped waiting
}

// NewLoopRunner makes a runner for loop.
func NewLoopRunner(loop *clock.Loop) *LoopRunner {
	r := &LoopRunner{loop: loop, stopped: make(chan struct{})}
	loop.AtTurnEnd(r.check)
	return r
}

// Run runs the loop until ctx ends; call it once.
func (r *LoopRunner) Run(ctx context.Context) error {
	defer close(r.stopped)
	return r.loop.Run(ctx)
}

// Do runs f on the loop's goroutine and waits for it.
func (r *LoopRunner) Do(f func()) error {
	select {
	case <-r.stopped:
		return ErrStopped
	default:
	}
	done := make(chan struct{})
	r.loop.Post(func() { f(); close(done) })
	select {
	case <-done:
		return nil
	case <-r.stopped:
		// The loop has returned, so f either ran to its end before or never will.
		select {
		case <-done:
			return nil
		default:
			return ErrStopped
		}
	}
}

// Progress returns once cond holds or ctx ends. cond runs on the loop's
// goroutine at the end of each turn.
func (r *LoopRunner) Progress(ctx context.Context, cond func() bool) error {
	w := &waiter{cond: cond, done: make(chan struct{})}
	r.loop.Post(func() { r.waiters = append(r.waiters, w) })
	select {
	case <-w.done:
		return nil
	case <-r.stopped:
		select {
		case <-w.done:
			return nil
		default:
			return ErrStopped
		}
	case <-ctx.Done():
		r.loop.Post(func() { w.gone = true })
		return fmt.Errorf("software: %w", ctx.Err())
	}
}

// AfterFunc calls f on a goroutine of its own once d has passed. The
// loop's clock is the wall clock, so a time.Timer keeps it. f must not run
// on the loop's goroutine, where Do would wait for the loop it holds.
func (r *LoopRunner) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// check runs at the end of every turn. It releases the waiters whose
// condition now holds.
func (r *LoopRunner) check() {
	kept := r.waiters[:0]
	for _, w := range r.waiters {
		switch {
		case w.gone:
		case w.cond():
			close(w.done)
		default:
			kept = append(kept, w)
		}
	}
	clear(r.waiters[len(kept):])
	r.waiters = kept
}
