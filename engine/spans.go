package engine

import "sort"

// spans is the set of byte ranges of a message placed so far, sorted and
// disjoint, with adjacent ranges merged. It tells a message placed whole
// from one whose packets add up to its length with some bytes placed twice
// under two DSNs (spec section 6.5). Packets that arrive in order extend
// its last range, so it stays short.
type spans struct {
	s []span
	n uint32 // bytes covered
}

type span struct{ off, end uint32 }

// add records the range [off, off+n). It reports false, recording
// nothing, when the range overlaps bytes already recorded, or when it
// would make more than limit ranges: an honest sender's holes are the
// packets it has in flight, which its window bounds.
func (c *spans) add(off, n uint32, limit int) bool {
	if n == 0 {
		return true
	}
	end := off + n
	// i is the first range that ends at or after off.
	i := len(c.s)
	if i > 0 && c.s[i-1].end > off {
		i = sort.Search(len(c.s), func(k int) bool { return c.s[k].end > off })
	}
	if i < len(c.s) && c.s[i].off < end {
		return false // overlaps range i
	}
	joinPrev := i > 0 && c.s[i-1].end == off
	joinNext := i < len(c.s) && c.s[i].off == end
	switch {
	case joinPrev && joinNext:
		c.s[i-1].end = c.s[i].end
		c.s = append(c.s[:i], c.s[i+1:]...)
	case joinPrev:
		c.s[i-1].end = end
	case joinNext:
		c.s[i].off = off
	default:
		if len(c.s) >= limit {
			return false
		}
		c.s = append(c.s, span{})
		copy(c.s[i+1:], c.s[i:])
		c.s[i] = span{off, end}
	}
	c.n += n
	return true
}

// contains reports whether every byte of [off, off+n) is recorded.
// Adjacent ranges are merged, so such a range lies within one.
func (c *spans) contains(off, n uint32) bool {
	i := sort.Search(len(c.s), func(k int) bool { return c.s[k].end > off })
	return i < len(c.s) && c.s[i].off <= off && off+n <= c.s[i].end
}

// covered is how many bytes the ranges hold.
func (c *spans) covered() uint32 { return c.n }

// reset empties the set, keeping its storage.
func (c *spans) reset() {
	c.s = c.s[:0]
	c.n = 0
}
