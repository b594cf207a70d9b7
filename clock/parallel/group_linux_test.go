package parallel

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
)

// cpuTime is the user and system time this process has used.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A worker that waits long, for the next window while another worker's
// process runs slowly or for the helpers to finish, sleeps rather than
// spin: while one process's events take 300 ms of wall time off the CPU,
// the waiting workers burn little of it. The events still fire in order.
func TestGroupWaitingWorkersSleep(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two cores for two workers")
	}
	g := NewGroup(2, 100, 2)
	var order []int
	slow := func(lp int) clock.Event {
		return clock.Func(func() {
			time.Sleep(50 * time.Millisecond) // a process held up off the CPU, as by a loaded machine
			order = append(order, lp)
		})
	}
	// Process 0 runs on the caller, process 1 on the helper; each holds up
	// three windows of its own, so each kind of worker waits.
	for i := range 3 {
		g.LP(0).At(clock.Time(200*i), slow(0))
		g.LP(1).At(clock.Time(200*i+100), slow(1))
	}
	before := cpuTime(t)
	g.RunWhile(clock.Never, func() bool { return true })
	used := cpuTime(t) - before
	t.Logf("%v of CPU over 300 ms of waits, %d sleeps", used, g.parks.Load())
	if want := []int{0, 1, 0, 1, 0, 1}; len(order) != len(want) {
		t.Fatalf("fired %v, want %v", order, want)
	}
	for i, lp := range []int{0, 1, 0, 1, 0, 1} {
		if order[i] != lp {
			t.Fatalf("fired %v", order)
		}
	}
	if g.parks.Load() == 0 || used > 150*time.Millisecond {
		t.Errorf("%v of CPU and %d sleeps: want waits asleep", used, g.parks.Load())
	}
}
