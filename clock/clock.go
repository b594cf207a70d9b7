// Package clock is how protocol code and the emulator tell time. It holds
// Time, the Clock and Timer interfaces, Sim, a deterministic event loop in
// virtual time, and Loop, which runs a Sim against the wall clock. Protocol
// logic never reads the wall clock, so the same code runs over Sim in tests
// and simulations and over a Loop on real sockets.
package clock

import (
	"fmt"
	"time"
)

// Time is a point in time, in nanoseconds since the clock's origin.
type Time int64

// Add returns t + d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns t - u as a duration.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

func (t Time) String() string { return fmt.Sprintf("%v", time.Duration(t)) }

// Never is a time later than any event. It is the deadline of a timer that
// is not armed.
const Never Time = 1<<63 - 1

// Clock gives protocol code the time and timers. All callbacks run on the
// clock's own loop, one at a time, so code driven by one Clock needs no locks.
type Clock interface {
	Now() Time
	// NewTimer makes a stopped timer that calls fire when it expires.
	NewTimer(fire func()) Timer
}

// Timer is a re-armable one-shot timer. Making one may allocate. Arming,
// re-arming and stopping it never do, so a protocol can reset its timers on
// every packet.
type Timer interface {
	// Reset arms the timer to fire at the absolute time at, replacing any
	// earlier deadline. A time in the past fires at the next opportunity.
	Reset(at Time)
	// Stop disarms the timer and reports whether it was armed.
	Stop() bool
	// Deadline is when the timer fires, or Never when it is stopped.
	Deadline() Time
}

// A Scheduler is a Clock that runs on a host that may not run it on time,
// and knows by how much. Late is the longest delay, in the last second or
// two, between when an event was due and when the host let it run: the
// host's scheduling delay. A Sim never runs late and is not a Scheduler.
// Protocol timers keep that much more, so that a busy host does not take
// its own slowness for loss.
type Scheduler interface {
	Clock
	Late() time.Duration
}
