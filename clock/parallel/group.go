// Package parallel runs a simulation split over the cores. A Group holds
// logical processes, each a clock.Sim of its own, and runs them window by
// window in parallel, with a result that does not depend on the number of
// cores. The simulator uses it to run one host's events per process. A
// single process on one core is just a clock.Sim.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mroce/mroce/clock"
)

// Group runs logical processes in parallel. Processes share no state. One
// reaches another only by Send, with an event at least the group's
// lookahead after its own time. For a network, the lookahead is a link's
// delay.
//
// The group runs the processes one window at a time, each window a
// lookahead long. Every process runs to the end of the window on some
// core. Then the events they sent one another are delivered, in order of
// sending process and then of sending. Each core schedules those for its
// own processes as the next window starts at the earliest event of any.
// Nothing a process does in a window can reach another before the window
// ends, so the run is the same, event for event, for any number of cores.
type Group struct {
	lps       []*clock.Sim
	lookahead time.Duration
	workers   int
	between   []func()

	last     clock.Time   // the end of the window being run
	windows  atomic.Int64 // windows started, the helpers' signal to run one
	finished atomic.Int64 // helpers done with the current window

	claimed   []claimCounter      // by worker, how many of its processes the window has handed out
	delivered []claimCounter      // by worker, the last window whose deliveries to its processes it made
	panicked  atomic.Pointer[any] // what a helper's process panicked with

	// A worker that has waited longer than its spins sleeps (park) until
	// woken: helpers for the next window, the caller for the helpers to
	// finish. sleepers counts them, so that a window wakes no one when
	// no one sleeps.
	mu       sync.Mutex
	wake     sync.Cond
	sleepers atomic.Int32
	parks    atomic.Int64 // times a worker slept, for tests

	// What the processes send one another is kept by sender and window in
	// sent, then by the worker that owns the receiving process in boxes.
	// What a window sends is delivered at the start of the next. Each
	// worker schedules the messages of its own processes while the
	// window's senders fill the other half.
	sent  []sending // [from*2 + window%2]
	boxes []outbox  // [(from*2 + window%2)*workers + owner]
}

// sending is what one process sent in one window. It records the window and
// the earliest time among its messages, where the next window may start.
// It fills a cache line of its own because the processes send at once, on
// different cores.
type sending struct {
	window   int64
	earliest clock.Time
	_        [48]byte
}

// outbox holds a process's messages of one window to the processes of one
// worker, in the order they were sent. It fills a cache line of its own,
// like sending.
type outbox struct {
	msgs []message
	_    [40]byte
}

// Between calls fn after every window, on the caller's goroutine while no
// process runs. What the processes keep apart may be evened out there.
func (g *Group) Between(fn func()) { g.between = append(g.between, fn) }

// A process's calendar has 2,048 buckets of 32 ns. That spans as much time
// as a single clock's 65,536 buckets of 1 ns, so a path's retransmission
// timer and an ACK's repeat still land in the calendar and not in its far
// heap. A host has few events per bucket, almost always in time order, so
// a push seldom walks its bucket's list. At 16 KiB the calendars of a
// group's processes stay in the cores' caches.
const (
	processBuckets = 1 << 11
	processBucket  = 32 // ns
)

type message struct {
	to int
	at clock.Time
	ev clock.Event
}

// NewGroup makes n processes whose clocks start at 0, run on workers cores.
// Zero workers means one per core.
func NewGroup(n int, lookahead time.Duration, workers int) *Group {
	if lookahead <= 0 {
		panic("parallel: a group needs a positive lookahead")
	}
	if workers <= 0 || workers > runtime.GOMAXPROCS(0) {
		workers = runtime.GOMAXPROCS(0) // more would spin against one another
	}
	g := &Group{lookahead: lookahead, workers: min(workers, n)}
	g.wake.L = &g.mu
	g.claimed, g.delivered = make([]claimCounter, g.workers), make([]claimCounter, g.workers)
	g.sent, g.boxes = make([]sending, 2*n), make([]outbox, 2*n*g.workers)
	for i := range g.sent {
		g.sent[i].window = -1 // nothing sent yet
	}
	for range n {
		g.lps = append(g.lps, clock.NewSimBuckets(processBuckets, processBucket))
	}
	return g
}

// Len is the number of processes.
func (g *Group) Len() int { return len(g.lps) }

// LP is process i's clock.
func (g *Group) LP(i int) *clock.Sim { return g.lps[i] }

// Now is the group's time. Between windows every process's clock is there.
func (g *Group) Now() clock.Time { return g.lps[0].Now() }

// Lookahead is the least delay of an event sent to another process.
func (g *Group) Lookahead() time.Duration { return g.lookahead }

// Send schedules ev on process to, at time at, from an event of process
// from. The time at must be at least the lookahead after from's time, and
// Send panics otherwise.
func (g *Group) Send(from, to int, at clock.Time, ev clock.Event) {
	if from == to {
		g.lps[to].At(at, ev)
		return
	}
	if at < g.lps[from].Now().Add(g.lookahead) {
		panic("parallel: an event for another process sooner than the lookahead")
	}
	// What is sent in this window, or between it and the next, is
	// delivered at the start of the next.
	w := g.windows.Load()
	k := from*2 + int(w&1)
	sent := &g.sent[k]
	boxes := g.boxes[k*g.workers : (k+1)*g.workers]
	if sent.window != w { // the first this window, so the half holds what was delivered a window ago
		sent.window, sent.earliest = w, clock.Never
		for i := range boxes {
			clear(boxes[i].msgs) // no reference kept to an event delivered a window ago
			boxes[i].msgs = boxes[i].msgs[:0]
		}
	}
	sent.earliest = min(sent.earliest, at)
	b := &boxes[to%g.workers]
	b.msgs = append(b.msgs, message{to, at, ev})
}

// pendingSent is the earliest time of the messages sent since the last
// window started, or Never.
func (g *Group) pendingSent() clock.Time {
	w, next := g.windows.Load(), clock.Never
	for from := range g.lps {
		if s := &g.sent[from*2+int(w&1)]; s.window == w {
			next = min(next, s.earliest)
		}
	}
	return next
}

// deliver schedules on worker w's processes what the others sent them
// before window started, in order of sending process, then of sending.
// Worker w owns processes w, w + workers, and so on. A worker taking one of
// them waits for the mark that they are delivered. The mark is set even if
// a delivery panics, so that no worker waits for ever.
func (g *Group) deliver(w int, window int64) {
	defer g.delivered[w].n.Store(window)
	for from := range g.lps {
		k := from*2 + int((window-1)&1)
		if g.sent[k].window != window-1 {
			continue
		}
		for _, m := range g.boxes[k*g.workers+w].msgs {
			if m.at <= g.lps[m.to].Now() { // a process was stepped on its own
				panic("parallel: an event for a process that has run past it")
			}
			g.lps[m.to].At(m.at, m.ev)
		}
	}
}

// RunWhile runs windows while cond holds and something is scheduled before
// end. It checks cond between windows and reports whether cond still holds.
// Every clock is then at the end of the last window run.
func (g *Group) RunWhile(end clock.Time, cond func() bool) bool {
	// A helper's panic in a window where the caller panicked too was never
	// raised. It ended with that run.
	g.panicked.Store(nil)
	if g.workers > 1 {
		defer g.startHelpers()()
	}
	for cond() {
		next := g.pendingSent()
		for _, lp := range g.lps {
			next = min(next, lp.Next())
		}
		if next == clock.Never || next > end {
			return true // nothing left, or nothing before end
		}
		last := min(next.Add(g.lookahead-1), end)
		g.window(last)
		for _, fn := range g.between {
			fn()
		}
	}
	return false
}

// A window lasts a link delay, a few hundred events of each process, and a
// run has thousands of them. The helpers that run workers 1, 2 and on
// therefore wait for the next window by spinning on its number, and the
// caller for the helpers to finish. Waking a thread that sleeps costs tens
// of microseconds on a virtual machine. A wait longer than helperSpins
// yields the core to the Go scheduler; one longer than parkSpins sleeps
// until woken, so that a worker whose core is taken by other programs, or
// whose run ended, burns no time waiting. A helper stops when RunWhile
// returns.
const (
	helperSpins = 1 << 12
	parkSpins   = 1 << 14
)

// park sleeps until done reports true, after a wait of parkSpins. The
// worker that changes what done reads calls unpark after the change.
func (g *Group) park(done func() bool) {
	g.mu.Lock()
	g.sleepers.Add(1) // before done is read again: an unpark after this sees it
	for !done() {
		g.parks.Add(1)
		g.wake.Wait()
	}
	g.sleepers.Add(-1)
	g.mu.Unlock()
}

// unpark wakes the sleeping workers, if any, to read what they wait on
// again.
func (g *Group) unpark() {
	if g.sleepers.Load() == 0 {
		return
	}
	g.mu.Lock()
	g.wake.Broadcast()
	g.mu.Unlock()
}

// waitFor spins on done, yields, and at last sleeps until done reports
// true.
func (g *Group) waitFor(done func() bool) {
	for spins := 0; !done(); spins++ {
		switch {
		case spins > parkSpins:
			g.park(done)
			return
		case spins > helperSpins:
			runtime.Gosched()
		}
	}
}

// startHelpers starts the helpers for a run of windows and returns what
// stops them.
func (g *Group) startHelpers() (stop func()) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	seen := g.windows.Load()
	for w := 1; w < g.workers; w++ {
		wg.Go(func() {
			seen := seen
			for {
				g.waitFor(func() bool { return g.windows.Load() != seen || quit.Load() })
				if n := g.windows.Load(); n != seen {
					seen = n
					g.runCaught(w)
					if g.finished.Add(1) == int64(g.workers-1) {
						g.unpark() // the caller may sleep on the helpers
					}
					continue
				}
				return // quit
			}
		})
	}
	return func() {
		quit.Store(true)
		g.unpark()
		wg.Wait()
	}
}

// window runs every process to time last. The caller is worker 0, and the
// helpers are the others.
func (g *Group) window(last clock.Time) {
	g.last = last
	if g.workers <= 1 {
		g.windows.Add(1)
		g.run(0)
		return
	}
	g.finished.Store(0)
	for i := range g.claimed {
		g.claimed[i].n.Store(0)
	}
	g.windows.Add(1) // the helpers' signal
	g.unpark()
	g.run(0)
	g.waitFor(func() bool { return g.finished.Load() == int64(g.workers-1) })
	if p := g.panicked.Swap(nil); p != nil {
		panic(*p) // raised on the caller's goroutine, as with one worker
	}
}

// runCaught runs worker w's share of a window on a helper. It keeps a panic
// of one of the processes for the caller to raise, so that the panic does
// not end the program.
func (g *Group) runCaught(w int) {
	defer func() {
		if p := recover(); p != nil {
			g.panicked.CompareAndSwap(nil, &p)
		}
	}()
	g.run(w)
}

// claimCounter is a worker's count of its processes handed out in the
// window. It fills a cache line of its own. The workers claim processes at
// once, and counters side by side would move one line between their cores
// at every claim.
type claimCounter struct {
	n atomic.Int64
	_ [56]byte
}

// run runs processes to the window's end on worker w. It runs its own
// first, the same every window, so that their state stays in its core's
// caches. Then it runs whatever the other workers have not yet started of
// theirs. A window's work is spread unevenly over the processes, and a
// worker done with its own would otherwise wait idle for the slowest. Each
// process runs once a window, on whichever worker claims it first. The
// processes share nothing within a window, so where each runs changes
// nothing.
func (g *Group) run(w int) {
	window := g.windows.Load()
	g.deliver(w, window)
	if g.workers <= 1 {
		for _, lp := range g.lps {
			lp.RunUntil(g.last)
		}
		return
	}
	for k := range g.workers {
		owner := (w + k) % g.workers
		mine := (len(g.lps) - owner + g.workers - 1) / g.workers // owner, owner + workers, and on
		for {
			j := int(g.claimed[owner].n.Add(1) - 1)
			if j >= mine {
				break
			}
			for spins := 0; k > 0 && g.delivered[owner].n.Load() != window; spins++ {
				if spins > helperSpins {
					runtime.Gosched() // the owner is still scheduling what was sent to it
				}
			}
			g.lps[owner+j*g.workers].RunUntil(g.last)
		}
	}
}
