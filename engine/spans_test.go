package engine

import (
	"math/rand/v2"
	"testing"
)

// A message's ranges cover exactly what was added once: an overlap is
// refused, adjacent ranges merge, and the count of ranges is bounded.
func TestSpans(t *testing.T) {
	var c spans
	for _, r := range [][2]uint32{{0, 10}, {20, 10}, {10, 10}} {
		if !c.add(r[0], r[1], 8) {
			t.Fatalf("add %v refused", r)
		}
	}
	if c.covered() != 30 || len(c.s) != 1 {
		t.Fatalf("covered %d in %d ranges, want 30 in 1", c.covered(), len(c.s))
	}
	for _, r := range [][2]uint32{{0, 1}, {29, 5}, {5, 10}, {25, 1}} {
		if c.add(r[0], r[1], 8) {
			t.Fatalf("overlapping add %v accepted", r)
		}
	}
	if c.covered() != 30 {
		t.Fatalf("covered %d after refused adds", c.covered())
	}
	c.reset()
	for k := uint32(0); k < 4; k++ {
		if !c.add(k*20, 10, 4) {
			t.Fatalf("range %d refused under the limit", k)
		}
	}
	if c.add(100, 10, 4) {
		t.Fatal("a fifth range accepted with a limit of 4")
	}
	if !c.add(10, 10, 4) || len(c.s) != 3 {
		t.Fatalf("a range that joins two was refused, or did not merge them: %v", c.s)
	}
	// Random segments in random order cover the message exactly once.
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 100; trial++ {
		c.reset()
		n := 1 + rng.IntN(50)
		order := rng.Perm(n)
		for _, k := range order {
			if !c.add(uint32(k)*7, 7, n) {
				t.Fatalf("trial %d: segment %d refused", trial, k)
			}
			if c.add(uint32(k)*7+3, 1, n) {
				t.Fatalf("trial %d: a byte inside segment %d accepted twice", trial, k)
			}
		}
		if c.covered() != uint32(n*7) || len(c.s) != 1 {
			t.Fatalf("trial %d: covered %d in %d ranges, want %d in 1", trial, c.covered(), len(c.s), n*7)
		}
	}
}

// contains tells a range that lies wholly within what was added, the
// piece of a packet that arrived whole, from one that only overlaps it.
func TestSpansContains(t *testing.T) {
	var c spans
	c.add(10, 10, 8)
	c.add(40, 20, 8)
	for _, tc := range []struct {
		off, n uint32
		want   bool
	}{
		{10, 10, true}, {12, 3, true}, {40, 20, true}, {59, 1, true},
		{5, 10, false}, {15, 10, false}, {20, 5, false}, {0, 5, false},
		{15, 30, false}, // from one range across a hole into another
		{60, 1, false}, {100, 1, false},
	} {
		if got := c.contains(tc.off, tc.n); got != tc.want {
			t.Errorf("contains(%d, %d) = %v, want %v", tc.off, tc.n, got, tc.want)
		}
	}
}
