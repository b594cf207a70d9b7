package sim

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// runEach returns every run's result in order of its index, however many
// go at once, and the error of the failed run with the lowest index.
// After a failure no other run starts.
func TestRunEach(t *testing.T) {
	for _, jobs := range []int{0, 1, 3, -1} {
		got, err := runEach(jobs, 50, func(i int) (int, error) { return i * i, nil })
		if err != nil || len(got) != 50 {
			t.Fatalf("jobs %d: %d results, %v", jobs, len(got), err)
		}
		for i, v := range got {
			if v != i*i {
				t.Fatalf("jobs %d: result %d is %d", jobs, i, v)
			}
		}
		// Runs after 17 wait for it to fail. Then the rest of the 1,000
		// must not all run.
		var ran atomic.Int64
		failed := make(chan struct{})
		_, err = runEach(jobs, 1000, func(i int) (int, error) {
			ran.Add(1)
			switch {
			case i == 17:
				close(failed)
				return 0, fmt.Errorf("run %d", i)
			case i == 30:
				return 0, fmt.Errorf("run %d", i)
			case i > 17:
				<-failed
			}
			return i, nil
		})
		if err == nil || err.Error() != "run 17" {
			t.Fatalf("jobs %d: error %v, want run 17's", jobs, err)
		}
		if n := ran.Load(); n > 500 {
			t.Fatalf("jobs %d: %d of 1,000 runs ran, run 17 failing", jobs, n)
		}
	}
	if got, err := runEach(4, 0, func(int) (int, error) { return 0, errors.New("ran") }); err != nil || len(got) != 0 {
		t.Fatalf("no runs: %v, %v", got, err)
	}
}
