package prefetch

import "unsafe"

// Line asks for the cache line holding p. It never faults: p may be nil
// or point anywhere.
//
//go:noescape
func Line(p unsafe.Pointer)
