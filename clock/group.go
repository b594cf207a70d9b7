package clock

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Group runs logical processes, each a Sim of its own, in parallel: a
// simulation split over the cores. Processes share no state; one reaches
// another only by Send, with an event at least the group's lookahead after
// its own time (for a network, a link delay). The group runs them window
// by window, a lookahead long: every process runs to the end of the window
// (on some core), then the events they sent one another are delivered, in
// order of (sending process, sending), each core scheduling those for its
// own processes as the next window starts at the earliest event of any.
// Nothing any process does in a window can reach another before the window
// ends, so the run is the same, event for event, for any number of cores.
type Group struct {
	lps       []*Sim
	lookahead time.Duration
	workers   int
	last      Time         // the end of the window being run
	windows   atomic.Int64 // windows started: the helpers' signal to run one
	finished  atomic.Int64 // helpers done with the current window
	between   []func()
	claimed   []claimCounter      // by worker: how many of its processes the window has handed out
	delivered []claimCounter      // by worker: the last window whose deliveries to its processes it made
	panicked  atomic.Pointer[any] // what a helper's process panicked with
	// What the processes send one another, kept by sender and window
	// (sent), then by the worker that owns the receiving process (boxes):
	// what a window sends is delivered at the start of the next, each
	// worker scheduling the messages of its own processes while the
	// window's senders fill the other half.
	sent  []sending // [from*2 + window%2]
	boxes []outbox  // [(from*2 + window%2)*workers + owner]
}

// sending is what one process sent in one window: which window, and the
// earliest time among its messages (where the next window may start).
// Alone in its line: the processes send at once, on different cores.
type sending struct {
	window   int64
	earliest Time
	_        [48]byte
}

// outbox is a process's messages of one window to the processes of one
// worker, in the order they were sent; alone in its line like sending.
type outbox struct {
	msgs []message
	_    [40]byte
}

// Between calls fn after every window, on the caller's goroutine while no
// process runs: where what the processes keep apart may be evened out.
func (g *Group) Between(fn func()) { g.between = append(g.between, fn) }

// A process's calendar: 2,048 buckets of 32 ns, 65.5 us as one clock's.
// A host's events are a sixty-fourth of a fabric's, a few to a bucket, in
// time order almost always: a push seldom walks its bucket's list. Small
// (16 KiB), the calendars of a group's processes stay in the cores'
// caches (with one clock's 65,536 buckets of 1 ns, 64 hosts' would take
// 32 MiB), and they still hold a path's retransmission timer and an ACK's
// repeat, which a narrower window (8,192 buckets of 1 ns, 8 us) left to
// the far heap: with 4,032 connections a cache of 4 MiB saw 109 million
// misses where it saw 119 million with those.
const (
	processBuckets = 1 << 11
	processShift   = 5
)

type message struct {
	to int
	at Time
	ev Event
}

// NewGroup makes n processes whose clocks start at 0, run on workers cores
// (0: one per core).
func NewGroup(n int, lookahead time.Duration, workers int) *Group {
	if lookahead <= 0 {
		panic("clock: a group needs a positive lookahead")
	}
	if workers <= 0 || workers > runtime.GOMAXPROCS(0) {
		workers = runtime.GOMAXPROCS(0) // more would spin against one another
	}
	g := &Group{lookahead: lookahead, workers: min(workers, n)}
	g.claimed, g.delivered = make([]claimCounter, g.workers), make([]claimCounter, g.workers)
	g.sent, g.boxes = make([]sending, 2*n), make([]outbox, 2*n*g.workers)
	for i := range g.sent {
		g.sent[i].window = -1 // none
	}
	for range n {
		s := NewSim()
		s.events.mask, s.events.shift = processBuckets-1, processShift
		g.lps = append(g.lps, s)
	}
	return g
}

// Len is the number of processes.
func (g *Group) Len() int { return len(g.lps) }

// LP is process i's clock.
func (g *Group) LP(i int) *Sim { return g.lps[i] }

// Now is the group's time: where every process's clock is between windows.
func (g *Group) Now() Time { return g.lps[0].now }

// Lookahead is the least delay of an event sent to another process.
func (g *Group) Lookahead() time.Duration { return g.lookahead }

// Send schedules ev on process to, at time at, from an event of process
// from; at is at least the lookahead after from's time (a bug otherwise).
func (g *Group) Send(from, to int, at Time, ev Event) {
	if from == to {
		g.lps[to].At(at, ev)
		return
	}
	if at < g.lps[from].now.Add(g.lookahead) {
		panic("clock: an event for another process sooner than the lookahead")
	}
	// Sent in this window, or between it and the next: for the next.
	w := g.windows.Load()
	k := from*2 + int(w&1)
	sent := &g.sent[k]
	boxes := g.boxes[k*g.workers : (k+1)*g.workers]
	if sent.window != w { // the first this window: what the half holds was delivered a window ago
		sent.window, sent.earliest = w, Never
		for i := range boxes {
			clear(boxes[i].msgs) // no reference kept to an event delivered a window ago
			boxes[i].msgs = boxes[i].msgs[:0]
		}
	}
	sent.earliest = min(sent.earliest, at)
	b := &boxes[to%g.workers]
	b.msgs = append(b.msgs, message{to, at, ev})
}

// pendingSent is the earliest time of the messages not yet delivered, or
// Never: what was sent since the last window started.
func (g *Group) pendingSent() Time {
	w, next := g.windows.Load(), Never
	for from := range g.lps {
		if s := &g.sent[from*2+int(w&1)]; s.window == w {
			next = min(next, s.earliest)
		}
	}
	return next
}

// deliver schedules on worker w's processes (w, w + workers, ...) what
// the others sent them before window started: in order of sending
// process, then sending. Its mark that they are delivered, which a worker
// taking one of its processes waits for, is set even if a delivery
// panics, so that no worker waits for ever.
func (g *Group) deliver(w int, window int64) {
	defer g.delivered[w].n.Store(window)
	for from := range g.lps {
		k := from*2 + int((window-1)&1)
		if g.sent[k].window != window-1 {
			continue
		}
		for _, m := range g.boxes[k*g.workers+w].msgs {
			if m.at <= g.lps[m.to].now {
				panic("clock: an event for a process that has run past it") // a process stepped on its own
			}
			g.lps[m.to].At(m.at, m.ev)
		}
	}
}

// RunWhile runs windows while cond holds (it is checked between windows)
// and something is scheduled before end; it reports whether cond still
// holds. Every clock is then at the end of the last window run.
func (g *Group) RunWhile(end Time, cond func() bool) bool {
	// A helper's panic of a window whose caller panicked too was never
	// raised: it ended with that run.
	g.panicked.Store(nil)
	if g.workers > 1 {
		defer g.startHelpers()()
	}
	for cond() {
		next := g.pendingSent()
		for _, lp := range g.lps {
			next = min(next, lp.Next())
		}
		if next == Never || next > end {
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

// A window is short (a link delay: a few hundred events of each process)
// and there are thousands of them, so the helpers that run the processes
// of workers 1, 2, ... wait for the next by spinning on the window's
// number, not on a channel (waking a thread costs tens of microseconds on
// a virtual machine), and yield once a wait grows long. They stop when
// RunWhile returns.
const helperSpins = 1 << 12

// startHelpers starts the helpers for a run of windows and returns what
// stops them.
func (g *Group) startHelpers() (stop func()) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	seen := g.windows.Load()
	for w := 1; w < g.workers; w++ {
		wg.Go(func() {
			seen := seen
			for spins := 0; ; spins++ {
				if n := g.windows.Load(); n != seen {
					seen, spins = n, 0
					g.runCaught(w)
					g.finished.Add(1)
					continue
				}
				if quit.Load() {
					return
				}
				if spins > helperSpins {
					runtime.Gosched()
				}
			}
		})
	}
	return func() {
		quit.Store(true)
		wg.Wait()
	}
}

// window runs every process to time last, on worker 0 (the caller) and
// the helpers (run).
func (g *Group) window(last Time) {
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
	g.run(0)
	for spins := 0; g.finished.Load() != int64(g.workers-1); spins++ {
		if spins > helperSpins {
			runtime.Gosched()
		}
	}
	if p := g.panicked.Swap(nil); p != nil {
		panic(*p) // a helper's process panicked: on the caller's goroutine, as with one worker
	}
}

// runCaught is run on a helper: a panic of one of its processes is kept
// for the caller to raise, not the end of the program.
func (g *Group) runCaught(w int) {
	defer func() {
		if p := recover(); p != nil {
			g.panicked.CompareAndSwap(nil, &p)
		}
	}()
	g.run(w)
}

// claimCounter is a worker's count of its processes handed out in the
// window, alone in its cache line: the workers claim processes at once,
// and counters side by side would move one line between their cores at
// every claim.
type claimCounter struct {
	n atomic.Int64
	_ [56]byte
}

// run runs processes to the window's end on worker w: its own (w, w +
// workers, ...: the same every window, so that their state stays in its
// core's caches), then whatever the other workers have not yet started of
// theirs. A window's work is spread unevenly over the processes (whose
// hosts happen to receive the most in it), and a worker done with its own
// would otherwise wait, idle, for the slowest. Every process is run once a
// window, on whichever worker claims it first; the processes share
// nothing within a window, so where each runs changes nothing.
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
		mine := (len(g.lps) - owner + g.workers - 1) / g.workers // owner, owner + workers, ...
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
