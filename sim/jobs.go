package sim

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// runEach runs run(0) to run(n-1), jobs of them at once, and returns
// their results in order of i. With jobs 0 or 1 they run one after the
// other on the caller's goroutine, and with jobs below 0 one per core.
// The error is that of the failed run with the lowest i. Once a run has
// failed no other is handed out, since the scenario fails and minutes of
// runs would be for nothing. A run already handed to a worker still runs.
//
// A scenario's runs share nothing, as each builds its own fabric, engines
// and clock. Their results are the same for any jobs. Only their wall
// times, and the heap a run can measure, are not their own when others
// run beside them.
func runEach[T any](jobs, n int, run func(i int) (T, error)) ([]T, error) {
	if jobs < 0 {
		jobs = runtime.GOMAXPROCS(0)
	}
	out := make([]T, n)
	errs := make([]error, n)
	if jobs <= 1 {
		for i := range n {
			if out[i], errs[i] = run(i); errs[i] != nil {
				return nil, errs[i]
			}
		}
		return out, nil
	}
	var wg sync.WaitGroup
	var failed atomic.Bool
	next := make(chan int)
	for range min(jobs, n) {
		wg.Go(func() {
			for i := range next {
				if out[i], errs[i] = run(i); errs[i] != nil {
					failed.Store(true)
				}
			}
		})
	}
	for i := 0; i < n && !failed.Load(); i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// heapShared reports whether runs at jobs at once share the heap, so that
// the heap a run measures is not its own.
func heapShared(jobs int) bool { return jobs > 1 || jobs < 0 }
