package engine

import (
	"encoding/binary"
	"math/bits"

	"github.com/mroce/mroce/proto"
)

// bitvec256 is a receiver path's record of the 256 PSNs below its highest:
// bit k is PSN highest-1-k, as in the ACK record, with k = 64w + i at bit i
// of word w.
type bitvec256 [4]uint64

// advance moves the highest PSN up by d: the old highest becomes bit d-1 and
// every bit k becomes k+d.
func (v *bitvec256) advance(d uint32) {
	if d > 256 {
		*v = bitvec256{}
		return
	}
	n := int(d)
	words, shift := n/64, uint(n%64)
	var out bitvec256
	for w := 3; w >= words; w-- {
		x := v[w-words] << shift
		if shift != 0 && w-words-1 >= 0 {
			x |= v[w-words-1] >> (64 - shift)
		}
		out[w] = x
	}
	*v = out
	if d >= 1 {
		v.set(int(d - 1))
	}
}

func (v *bitvec256) set(k int)      { v[k/64] |= 1 << (k % 64) }
func (v *bitvec256) has(k int) bool { return v[k/64]&(1<<(k%64)) != 0 }

// write stores the vector into an ACK record's Bitvector field: bit k in
// byte k/8 at mask 0x80 >> (k mod 8). A word's bits reversed put its byte
// i, reversed, in byte 7-i: written big-endian, that is byte i on the
// wire: four stores, not 32 (an ACK carries a record for every path that
// sent since the last, and a simulation writes hundreds of thousands).
func (v *bitvec256) write(r proto.AckRecord) {
	var out [32]byte
	for w, x := range v {
		binary.BigEndian.PutUint64(out[8*w:], bits.Reverse64(x))
	}
	r.SetBitvector(out)
}

// dsnWindow is a receiver's record of DSNs: every DSN before cum arrived;
// bit (d mod size) of the ring is set for DSNs in [cum, cum+size) that did.
type dsnWindow struct {
	cum  uint32
	size uint32
	ring []uint64
}

func newDSNWindow(initial uint32, size int) dsnWindow {
	// A power of two, so that d mod n stays continuous across the 2^32 wrap.
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
	case off >= 1<<31: // before cum (serially)
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

// mark records d (which check found new) and advances cum past every DSN
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

// bitset is a set of small non-negative integers (a sender's ready
// streams).
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
