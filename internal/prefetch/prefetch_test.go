package prefetch

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"
)

// A prefetch is a hint: nil, a pointer into an object or one just past its
// end are all asked for without a fault, and nothing is written.
func TestLineNeverFaults(t *testing.T) {
	buf := make([]byte, 64)
	Line(nil)
	Line(unsafe.Pointer(&buf[0]))
	Line(unsafe.Add(unsafe.Pointer(&buf[0]), len(buf)))
	Line(unsafe.Add(unsafe.Pointer(&buf[0]), 1<<30))
	for i, b := range buf {
		if b != 0 {
			t.Fatalf("byte %d is %d after a prefetch", i, b)
		}
	}
}

// Lines asks for an object's lines, from anywhere in its first, and
// writes nothing.
func TestLinesWriteNothing(t *testing.T) {
	x := make([]uint64, 40) // 320 bytes: five lines, or six from an offset
	Lines(unsafe.Pointer(&x[0]), 5)
	Lines(unsafe.Pointer(&x[3]), 4)
	for i, v := range x {
		if v != 0 {
			t.Fatalf("word %d is %d after a prefetch", i, v)
		}
	}
}

// The working sets the benchmarks below walk: from what one core's caches
// hold to what a simulation of thousands of connections touches.
var walkSizes = []int{1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20, 128 << 20}

// line is one cache line of a walk: the index of the next line to visit.
type line struct {
	next int
	_    [56]byte
}

// randomCycle returns size bytes of lines linked in one random cycle.
func randomCycle(size int) []line {
	lines := make([]line, size/64)
	order := rand.New(rand.NewPCG(1, 2)).Perm(len(lines))
	for i, l := range order {
		lines[l].next = order[(i+1)%len(order)]
	}
	return lines
}

// BenchmarkDependentLoads is this machine's memory as one core sees it:
// ns/op is the time of a load whose address the load before it gives,
// one cache line each, in a random walk over a working set of the size
// named. Where the time jumps is where the caches end: beyond it, every
// line an event reads from state that has left them costs that much,
// unless it was asked for ahead (clock.Warmer) or the core finds other
// work meanwhile.
func BenchmarkDependentLoads(b *testing.B) {
	for _, size := range walkSizes {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			lines := randomCycle(size)
			at := 0
			b.ResetTimer()
			for range b.N {
				at = lines[at].next
			}
			sink = at
		})
	}
}

// BenchmarkPagedLoads walks 16,384 lines as BenchmarkDependentLoads does,
// packed (1 MiB: the caches hold them) and one a 4 KiB page (the same lines
// for the caches, 64 MiB of addresses): what the second adds is the TLB's,
// a page walk for most loads.
func BenchmarkPagedLoads(b *testing.B) {
	const n, page = 16384, 4096
	for _, spread := range []bool{false, true} {
		name := "packed"
		if spread {
			name = "onePerPage"
		}
		b.Run(name, func(b *testing.B) {
			walk := randomCycle(n * 64)
			stride := 1 // in lines
			if spread {
				stride = page / 64
			}
			lines := make([]line, n*stride)
			slot := func(i int) int { return i*stride + i*7%stride } // a line of page i, not always the first
			for i, l := range walk {
				lines[slot(i)].next = slot(l.next)
			}
			at := slot(0)
			b.ResetTimer()
			for range b.N {
				at = lines[at].next
			}
			sink = at
		})
	}
}

// BenchmarkIndependentLoads walks several random cycles over 128 MiB at
// once, a load of each in turn: the loads of different walks do not wait
// for one another, so the core keeps that many misses in flight. ns/op is
// the time of one load of each walk, MB/s the lines loaded a second (times
// 64 bytes). With -cpu 2 each core walks its own cycles at the same time
// (RunParallel), and the lines a second double if both cores' misses
// overlap as well. One walk's time a line over that of n walks is how far
// the misses of independent work overlap: what warming events ahead
// (clock.Warmer) can win at most.
func BenchmarkIndependentLoads(b *testing.B) {
	const size = 128 << 20
	for _, walks := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("walks%d", walks), func(b *testing.B) {
			cycles := make([][]line, runtime.GOMAXPROCS(0)) // RunParallel's goroutines, one cycle each
			for i := range cycles {
				cycles[i] = randomCycle(size)
			}
			var next atomic.Int32
			b.SetBytes(int64(walks) * 64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				lines := cycles[int(next.Add(1)-1)%len(cycles)]
				at := make([]int, walks)
				for i := range at {
					at[i] = i * len(lines) / walks
				}
				for pb.Next() {
					for i := range at {
						at[i] = lines[at[i]].next
					}
				}
				sink = at[0]
			})
		})
	}
}

var sink int
