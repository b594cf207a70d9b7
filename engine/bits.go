package engine

import (
	"encoding/binary"
	"math/bits"

	"github.com/mroce/mroce/proto"
)

// bitvec256 is a receiver path's record of the 256 PSNs below its highest.
// Bit k is PSN highest-1-k, as in the ACK record (spec section 5.5). Bit k
// = 64w + i is bit i of word w.
type bitvec256 [4]uint64

// advance moves the highest PSN up by d. The old highest becomes bit d-1,
// and every bit k becomes bit k+d.
func (v *bitvec256) advance(d uint32) {
	if d > 256 {
		*v = bitvec256{}
		return
	}
	// In place, from the highest word down: word w reads only words at or
	// below w, which are still the old ones. A copy through a temporary
	// made the store of every arriving packet wait on its own loads.
	words, shift := int(d/64), d%64
	for w := 3; w >= 0; w-- {
		var x uint64
		if src := w - words; src >= 0 {
			x = v[src] << shift
			if src > 0 {
				x |= v[src-1] >> (64 - shift) // 0 for a shift of 0: Go shifts past the width to 0
			}
		}
		v[w] = x
	}
	if d >= 1 {
		v.set(int(d - 1))
	}
}

func (v *bitvec256) set(k int) { v[k/64] |= 1 << (k % 64) }

// write stores the vector into an ACK record's Bitvector field, where bit k
// is in byte k/8 at mask 0x80 >> (k mod 8). Reversing a word's bits puts
// its byte i, reversed, in byte 7-i. Written big-endian, that is byte i on
// the wire. So the vector takes four stores, not 32. It matters because an
// ACK carries a record for every path that sent since the last one.
func (v *bitvec256) write(r proto.AckRecord) {
	var out [32]byte
	for w, x := range v {
		binary.BigEndian.PutUint64(out[8*w:], bits.Reverse64(x))
	}
	r.SetBitvector(out)
}

// dsnWindow is a receiver's record of DSNs (spec section 6.5). Every DSN
// before cum arrived. For the DSNs in [cum, cum+size), bit d mod n of the
// ring is set when d arrived, where n is the ring's length in bits.
type dsnWindow struct {
	cum  uint32
	size uint32
	ring []uint64
}

func newDSNWindow(initial uint32, size int) dsnWindow {
	// n is a power of two, so that d mod n stays continuous across the 2^32
	// wrap.
	n := 64
	for n < size {
		n *= 2
	}
	return dsnWindow{cum: initial, size: uint32(size), ring: make([]uint64, n/64)}
}

// dsnVerdict is where a DSN falls.
type dsnVerdict uint8

const (
	dsnNew dsnVerdict = iota
	dsnDuplicate
	dsnOutOfWindow
)

func (w *dsnWindow) check(d uint32) dsnVerdict {
	off := d - w.cum
	switch {
	case off >= 1<<31: // before cum, serially
		return dsnDuplicate
	case off >= w.size:
		return dsnOutOfWindow
	}
	i := d % uint32(len(w.ring)*64)
	if w.ring[i/64]&(1<<(i%64)) != 0 {
		return dsnDuplicate
	}
	return dsnNew
}

// mark records d, which check found new, and advances cum past every DSN
// now received.
func (w *dsnWindow) mark(d uint32) {
	n := uint32(len(w.ring) * 64)
	i := d % n
	w.ring[i/64] |= 1 << (i % 64)
	for {
		j := w.cum % n
		if w.ring[j/64]&(1<<(j%64)) == 0 {
			return
		}
		w.ring[j/64] &^= 1 << (j % 64)
		w.cum++
	}
}

// bitset is a set of small non-negative integers, a sender's ready streams.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) set(k int)   { b[k/64] |= 1 << (k % 64) }
func (b bitset) clear(k int) { b[k/64] &^= 1 << (k % 64) }

// next is the least member in [from, to), or -1.
func (b bitset) next(from, to int) int {
	for w := from / 64; w*64 < to; w++ {
		word := b[w]
		if w == from/64 {
			word &^= 1<<(from%64) - 1
		}
		if word != 0 {
			if k := w*64 + bits.TrailingZeros64(word); k < to {
				return k
			}
			return -1
		}
	}
	return -1
}
