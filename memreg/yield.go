package memreg

import "runtime"

func yield() { runtime.Gosched() }
