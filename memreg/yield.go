package memreg

import "runtime"

// yield lets other goroutines run while Deregister waits for placements.
func yield() { runtime.Gosched() }
