//go:build !amd64

package prefetch

import "unsafe"

// Line does nothing where no prefetch instruction is wired in: a hint, not
// a requirement.
func Line(p unsafe.Pointer) {}
