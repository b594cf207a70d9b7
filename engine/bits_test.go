package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/mroce/mroce/proto"
)

// TestBitvectorMatchesModel checks the receiver's bitvector against a plain
// set. Written into an ACK record, it reads back through proto's accessor
// as "PSN highest-1-k received".
func TestBitvectorMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		highest := rng.Uint32()
		received := map[uint32]bool{highest: true}
		var v bitvec256
		for step := 0; step < 50; step++ {
			if rng.IntN(3) == 0 {
				d := uint32(1 + rng.IntN(300))
				v.advance(d)
				highest += d
				received[highest] = true
			} else {
				k := rng.IntN(256)
				v.set(k)
				received[highest-1-uint32(k)] = true
			}
		}
		rec := make(proto.AckRecord, proto.AckRecordLen)
		v.write(rec)
		for k := 0; k < 256; k++ {
			if got, want := rec.Received(k), received[highest-1-uint32(k)]; got != want {
				t.Fatalf("trial %d: bit %d (PSN %d) = %v, want %v", trial, k, highest-1-uint32(k), got, want)
			}
		}
	}
}

// TestDSNWindow checks the receiver's DSN window at its edges and across
// the 2^32 wrap, with a hole that holds the cumulative DSN back until it
// fills.
func TestDSNWindow(t *testing.T) {
	w := newDSNWindow(0xFFFFFFF0, 64)
	if w.check(0xFFFFFFEF) != dsnDuplicate || w.check(0xFFFFFFF0) != dsnNew || w.check(0x30) != dsnOutOfWindow {
		t.Fatal("window edges")
	}
	// Receive everything but 0xFFFFFFF2, across the wrap.
	for d := uint32(0xFFFFFFF0); d != 0x20; d++ {
		if d != 0xFFFFFFF2 {
			if w.check(d) != dsnNew {
				t.Fatalf("DSN %#x not new", d)
			}
			w.mark(d)
		}
	}
	if w.cum != 0xFFFFFFF2 || w.check(0xFFFFFFF3) != dsnDuplicate || w.check(0xFFFFFFF2) != dsnNew {
		t.Fatalf("cum %#x with a hole at 0xfffffff2", w.cum)
	}
	w.mark(0xFFFFFFF2)
	if w.cum != 0x20 {
		t.Fatalf("cum %#x after the hole filled, want 0x20", w.cum)
	}
}

// TestMsgRingMatchesMap checks that a stream's ring of messages in progress
// reads as a map of MSNs within the window from next. It does so as next
// advances over completed messages, as the MSNs wrap the 32-bit space, and
// as the ring grows.
func TestMsgRingMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const window = 200
	for trial := 0; trial < 50; trial++ {
		next := -uint32(rng.IntN(1000)) // near the wrap
		var ring msgRing
		model := map[uint32]*rxMessage{}
		for step := 0; step < 2000; step++ {
			switch msn := next + uint32(rng.IntN(window)); rng.IntN(4) {
			case 0, 1:
				if model[msn] == nil {
					m := &rxMessage{rsn: msn}
					model[msn] = m
					ring.put(next, msn, m)
				}
			case 2: // the next message completes
				if m := ring.get(next, next); m != model[next] {
					t.Fatalf("trial %d: message %d is %v, want %v", trial, next, m, model[next])
				} else if m != nil {
					ring.put(next, next, nil)
					delete(model, next)
					next++
				}
			default:
				if ring.get(next, next-1-uint32(rng.IntN(5))) != nil {
					t.Fatalf("trial %d: a message before next %d", trial, next)
				}
			}
			for msn := next; msn != next+window; msn++ {
				if got := ring.get(next, msn); got != model[msn] {
					t.Fatalf("trial %d step %d: message %d is %v, want %v", trial, step, msn, got, model[msn])
				}
			}
		}
		if len(ring) > 256 {
			t.Fatalf("ring of %d slots for a window of %d", len(ring), window)
		}
	}
}

// TestBitsetNext checks that bitset.next finds the least member in a range,
// as a scan would, across word boundaries and at the ends.
func TestBitsetNext(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		n := 1 + rng.IntN(200)
		b, in := newBitset(n), make([]bool, n)
		for range rng.IntN(n + 1) {
			k := rng.IntN(n)
			b.set(k)
			in[k] = true
			if rng.IntN(4) == 0 {
				b.clear(k)
				in[k] = false
			}
		}
		from := rng.IntN(n + 1)
		to := from + rng.IntN(n-from+1)
		want := -1
		for k := from; k < to; k++ {
			if in[k] {
				want = k
				break
			}
		}
		if got := b.next(from, to); got != want {
			t.Fatalf("n %d, members %v: next(%d, %d) = %d, want %d", n, in, from, to, got, want)
		}
	}
}

// BenchmarkBitvectorAdvance is the receiver's work for a path's next PSN,
// once per data packet.
func BenchmarkBitvectorAdvance(b *testing.B) {
	var v bitvec256
	for range b.N {
		v.advance(1)
	}
}
