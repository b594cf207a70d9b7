package sim

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// runEach runs run(0) to run(n-1), jobs of them at once (jobs 0 or 1: one
// after the other on the caller's goroutine; below 0: one per core), and
// returns their results in order of i; the error is that of the first run
// (by i) that failed, and once one has, no other is handed out (the
// scenario fails: minutes of runs would be for nothing; one already handed
// to a worker still runs). A scenario's runs share nothing (each builds its own
// fabric, engines and clock), so their results are the same for any jobs;
// only their wall times, and the heap a run can measure, are not its own
// when others run beside it.
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
