package clock

import "math/bits"

// calendar is the Sim's queue of events and timer entries. The near future
// is a calendar queue, a ring of time buckets. An emulator schedules almost
// everything there, because serializations, propagation delays, pacing and
// acknowledgment timers are micro- and nanoseconds away. A 4-ary heap holds
// the rest.
//
// A bucket is a linked list of its events sorted by time and sequence. On
// NewSim's calendar a bucket is one nanosecond, so its events arrive in
// order and are appended at its tail. A calendar with wider buckets, as one
// host's process in a parallel run has, still sees its few events per
// bucket arrive in order almost always. Push and pop therefore cost O(1)
// for near events instead of O(log n). List nodes come from a pool that
// grows only when more events are pending than ever before, so a steady run
// allocates nothing.
//
// Every event in a bucket lies within one span of the ring from now's
// bucket. A bucket therefore never mixes two laps of the ring, and the first
// non-empty bucket at or after now's holds the earliest near event. Far
// events stay in the heap even when the window reaches them, and pop
// compares the two.
type calendar struct {
	ready    bool
	mask     int  // buckets - 1, set before the first push for a size other than calendarBuckets
	shift    uint // a bucket is 1 << shift ns, set with mask
	buckets  []bucket
	nonEmpty []uint64 // a bit per bucket
	near     int      // events in buckets
	floor    Time     // no near event is earlier, so nearMin's scan starts here
	nodes    []calNode
	free     int32 // first free node, -1 when none
	far      []eventEntry
}

// bucket is a bucket's list of node indexes, with head -1 when empty. Head
// and tail sit side by side, so a push or pop touches one cache line of the
// ring, not two.
type bucket struct{ head, tail int32 }

type calNode struct {
	e    eventEntry
	next int32
}

const (
	calendarBuckets = 1 << 16         // of 1 ns, so a bucket holds one time
	calendarSpan    = calendarBuckets // in ns
)

func (c *calendar) init() {
	buckets := c.mask + 1
	if c.mask == 0 {
		buckets = calendarBuckets
	}
	c.mask = buckets - 1
	c.buckets, c.nonEmpty = make([]bucket, buckets), make([]uint64, buckets/64)
	for i := range c.buckets {
		c.buckets[i].head = -1
	}
	c.free = -1
	c.ready = true
}

func (c *calendar) len() int { return c.near + len(c.far) }

func (c *calendar) newNode(e eventEntry) int32 {
	if c.free >= 0 {
		i := c.free
		c.free = c.nodes[i].next
		c.nodes[i] = calNode{e, -1}
		return i
	}
	c.nodes = append(c.nodes, calNode{e, -1})
	return int32(len(c.nodes) - 1)
}

// push adds e. The Sim's current time is now, and e.at is not earlier.
func (c *calendar) push(e eventEntry, now Time) {
	if !c.ready {
		c.init()
	}
	if int64(e.at>>c.shift)-int64(now>>c.shift) > int64(c.mask) {
		c.far = append(c.far, e)
		heapUp(c.far, len(c.far)-1)
		return
	}
	if c.near == 0 || e.at < c.floor {
		c.floor = e.at
	}
	i := int(e.at>>c.shift) & c.mask
	n := c.newNode(e)
	switch bk := &c.buckets[i]; {
	case bk.head < 0:
		bk.head, bk.tail = n, n
		c.nonEmpty[i/64] |= 1 << (i % 64)
	case !e.less(c.nodes[bk.tail].e): // in order, the usual case
		c.nodes[bk.tail].next = n
		bk.tail = n
	case e.less(c.nodes[bk.head].e):
		c.nodes[n].next = bk.head
		bk.head = n
	default: // between head and tail
		p := bk.head
		for !e.less(c.nodes[c.nodes[p].next].e) {
			p = c.nodes[p].next
		}
		c.nodes[n].next = c.nodes[p].next
		c.nodes[p].next = n
	}
	c.near++
}

// nearMin returns the bucket holding the earliest near event, or -1. It
// scans the bitmap from the floor or from now, whichever is later, and
// moves the floor to what it finds. A queue whose next event is far off
// then scans the gap once, not at every look. A parallel run looks at each
// process's queue every window.
func (c *calendar) nearMin(now Time) int {
	if c.near == 0 {
		return -1
	}
	from := max(now, c.floor)
	start := int(from>>c.shift) & c.mask
	w := start / 64
	word := c.nonEmpty[w] &^ (1<<(start%64) - 1) // buckets at or after start in this word
	for n := 0; n <= len(c.nonEmpty); n++ {
		if word != 0 {
			b := w*64 + bits.TrailingZeros64(word)
			c.floor = (from>>c.shift + Time((b-start)&c.mask)) << c.shift // the bucket's start
			return b
		}
		w = (w + 1) % len(c.nonEmpty)
		word = c.nonEmpty[w]
	}
	panic("clock: calendar count and bitmap disagree")
}

// Where the earliest event is, as peek finds it for take.
const (
	inFar  = -1 // the far heap's top
	noneAt = -2 // nowhere, because the calendar is empty
)

// peek returns the earliest event without removing it, and where it is.
// That is its bucket, inFar or noneAt. take(where) removes it, as long as
// nothing was pushed in between.
func (c *calendar) peek(now Time) (eventEntry, int) {
	b := c.nearMin(now)
	switch {
	case b >= 0 && (len(c.far) == 0 || c.nodes[c.buckets[b].head].e.less(c.far[0])):
		return c.nodes[c.buckets[b].head].e, b
	case len(c.far) > 0:
		return c.far[0], inFar
	}
	return eventEntry{}, noneAt
}

// take removes the earliest event from where peek found it.
func (c *calendar) take(b int) eventEntry {
	if b >= 0 {
		bk := &c.buckets[b]
		n := bk.head
		e := c.nodes[n].e
		bk.head = c.nodes[n].next
		if bk.head < 0 {
			c.nonEmpty[b/64] &^= 1 << (b % 64)
		}
		c.nodes[n] = calNode{next: c.free}
		c.free = n
		c.near--
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

// The far heap is 4-ary, half the depth of a binary heap.

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
