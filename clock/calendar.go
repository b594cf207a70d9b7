package clock

import "math/bits"

// calendar is the Sim's queue of one-shot events: a calendar queue (a ring
// of time buckets) for the near future, which is where an emulator schedules
// almost everything (serializations and propagation delays of micro- and
// nanoseconds), and a 4-ary heap for the rest. A bucket holds its events
// sorted by (time, sequence); most arrive in that order and are appended.
// Push and pop cost O(1) for near events instead of O(log n).
//
// Every event in a bucket lies in the window [now rounded down to a bucket,
// + calendarSpan), so a bucket never mixes two laps of the ring, and the
// first non-empty bucket at or after now's holds the earliest near event.
// Far events stay in the heap even when the window reaches them; pop
// compares the two.
type calendar struct {
	buckets  [calendarBuckets]bucket
	nonEmpty [calendarBuckets / 64]uint64
	near     int // events in buckets
	far      []eventEntry
}

const (
	bucketShift     = 1 // 2 ns per bucket
	calendarBuckets = 1 << 15
	calendarSpan    = calendarBuckets << bucketShift // 65.5 µs
)

type bucket struct {
	events []eventEntry
	head   int
}

func (c *calendar) len() int { return c.near + len(c.far) }

// push adds e; now is the Sim's current time (e.at >= now).
func (c *calendar) push(e eventEntry, now Time) {
	if (e.at>>bucketShift)-(now>>bucketShift) >= calendarBuckets {
		c.far = append(c.far, e)
		heapUp(c.far, len(c.far)-1)
		return
	}
	if c.buckets[0].events == nil {
		c.allocate()
	}
	i := int(e.at>>bucketShift) & (calendarBuckets - 1)
	b := &c.buckets[i]
	b.events = append(b.events, e)
	// Keep the bucket sorted: move e back past later events.
	for j := len(b.events) - 1; j > b.head && e.less(b.events[j-1]); j-- {
		b.events[j], b.events[j-1] = b.events[j-1], e
	}
	c.nonEmpty[i/64] |= 1 << (i % 64)
	c.near++
}

// allocate gives every bucket room for a few events from one slab, so that a
// steady run does not allocate as time reaches buckets it never used before.
func (c *calendar) allocate() {
	const room = 4
	slab := make([]eventEntry, calendarBuckets*room)
	for i := range c.buckets {
		c.buckets[i].events = slab[i*room : i*room : i*room+room]
	}
}

// nearMin returns the bucket holding the earliest near event, or nil.
func (c *calendar) nearMin(now Time) *bucket {
	if c.near == 0 {
		return nil
	}
	start := int(now>>bucketShift) & (calendarBuckets - 1)
	w := start / 64
	word := c.nonEmpty[w] &^ (1<<(start%64) - 1) // buckets at or after start in this word
	for n := 0; n <= len(c.nonEmpty); n++ {
		if word != 0 {
			return &c.buckets[w*64+bits.TrailingZeros64(word)]
		}
		w = (w + 1) % len(c.nonEmpty)
		word = c.nonEmpty[w]
	}
	panic("clock: calendar count and bitmap disagree")
}

// peek returns the earliest event without removing it.
func (c *calendar) peek(now Time) (eventEntry, bool) {
	b := c.nearMin(now)
	switch {
	case b != nil && (len(c.far) == 0 || b.events[b.head].less(c.far[0])):
		return b.events[b.head], true
	case len(c.far) > 0:
		return c.far[0], true
	}
	return eventEntry{}, false
}

// pop removes and returns the earliest event.
func (c *calendar) pop(now Time) eventEntry {
	b := c.nearMin(now)
	if b != nil && (len(c.far) == 0 || b.events[b.head].less(c.far[0])) {
		e := b.events[b.head]
		b.events[b.head] = eventEntry{}
		b.head++
		c.near--
		if b.head == len(b.events) {
			b.events, b.head = b.events[:0], 0
			i := (e.at >> bucketShift) & (calendarBuckets - 1)
			c.nonEmpty[i/64] &^= 1 << (i % 64)
		}
		return e
	}
	e := c.far[0]
	last := len(c.far) - 1
	c.far[0] = c.far[last]
	c.far[last] = eventEntry{}
	c.far = c.far[:last]
	if last > 0 {
		heapDown(c.far, 0)
	}
	return e
}

// The far heap is 4-ary: half the depth of a binary heap.

func heapUp(h []eventEntry, i int) {
	e := h[i]
	for i > 0 {
		p := (i - 1) / 4
		if !e.less(h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
}

func heapDown(h []eventEntry, i int) {
	n := len(h)
	e := h[i]
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < min(c+4, n); j++ {
			if h[j].less(h[m]) {
				m = j
			}
		}
		if !h[m].less(e) {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = e
}
