package memreg

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
)

// FetchAdd and CompareSwap act on big-endian integers, return the value
// before, and refuse targets out of bounds or not at a multiple of 8.
func TestAtomicOperations(t *testing.T) {
	buf := make([]byte, 24)
	g, err := newSeeded().NewDomain().Register(buf, LocalWrite|RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(buf[8:], ^uint64(0))
	if old, err := g.FetchAdd(8, 2); err != nil || old != ^uint64(0) || binary.BigEndian.Uint64(buf[8:]) != 1 {
		t.Fatalf("FetchAdd: old %#x, %v, now %#x; want all ones, nil, 1 (modulo 2^64)", old, err, binary.BigEndian.Uint64(buf[8:]))
	}
	if old, err := g.CompareSwap(8, 5, 7); err != nil || old != 1 || binary.BigEndian.Uint64(buf[8:]) != 1 {
		t.Fatalf("CompareSwap unequal: old %d, %v, now %d; want 1, nil, 1 (unchanged)", old, err, binary.BigEndian.Uint64(buf[8:]))
	}
	if old, err := g.CompareSwap(8, 1, 7); err != nil || old != 1 || binary.BigEndian.Uint64(buf[8:]) != 7 {
		t.Fatalf("CompareSwap equal: old %d, %v, now %d; want 1, nil, 7", old, err, binary.BigEndian.Uint64(buf[8:]))
	}
	if buf[7] != 0 || buf[16] != 0 {
		t.Fatal("an atomic wrote outside its 8 bytes")
	}
	for _, c := range []struct {
		off  uint64
		want error
	}{{4, ErrAlign}, {24, ErrBounds}, {^uint64(0) - 7, ErrBounds}} {
		if _, err := g.FetchAdd(c.off, 1); !errors.Is(err, c.want) {
			t.Errorf("FetchAdd at %d: %v, want %v", c.off, err, c.want)
		}
		if _, err := g.CompareSwap(c.off, 0, 1); !errors.Is(err, c.want) {
			t.Errorf("CompareSwap at %d: %v, want %v", c.off, err, c.want)
		}
	}
}

// Atomics on one target from many goroutines, through two regions that
// alias the same bytes, lose no update.
func TestAtomicsDoNotInterleave(t *testing.T) {
	buf := make([]byte, 8)
	reg := newSeeded()
	a, err := reg.NewDomain().Register(buf, LocalWrite|RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	b, err := reg.NewDomain().Register(buf, LocalWrite|RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 1000
	var wg sync.WaitGroup
	for w := range workers {
		g := a
		if w%2 == 1 {
			g = b
		}
		wg.Go(func() {
			for range each {
				if _, err := g.FetchAdd(0, 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := binary.BigEndian.Uint64(buf); got != workers*each {
		t.Fatalf("counter %d after %d increments", got, workers*each)
	}
}
