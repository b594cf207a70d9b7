// Package prefetch asks the memory for a cache line that will be read soon,
// without waiting for it. A discrete-event loop over thousands of
// connections spends more of its time waiting for memory than computing:
// each event reads state that the events before it pushed out of the
// cache, and reads it as a chain (an event's packet, the packet's buffer,
// the buffer's connection). Asking for the next event's lines while the
// current one runs lets those misses overlap.
package prefetch

import "unsafe"

// Lines asks for n cache lines from the one holding p on: the first lines
// of an object larger than one. Each p + 64 i must lie inside p's object
// (the race detector's pointer checks stop the program otherwise).
func Lines(p unsafe.Pointer, n int) {
	for i := range n {
		Line(unsafe.Add(p, 64*i))
	}
}
