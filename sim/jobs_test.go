package sim

import (
	"errors"
	"fmt"
	"testing"
)

// runEach returns every run's result in order of its index, however many
// go at once, and the error of the first run (by index) that failed.
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
		_, err = runEach(jobs, 50, func(i int) (int, error) {
			if i == 17 || i == 30 {
				return 0, fmt.Errorf("run %d", i)
			}
			return i, nil
		})
		if err == nil || err.Error() != "run 17" {
			t.Fatalf("jobs %d: error %v, want run 17's", jobs, err)
		}
	}
	if got, err := runEach(4, 0, func(int) (int, error) { return 0, errors.New("ran") }); err != nil || len(got) != 0 {
		t.Fatalf("no runs: %v, %v", got, err)
	}
}
