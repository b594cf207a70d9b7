package prefetch

import (
	"testing"
	"unsafe"
)

// A prefetch is a hint: nil, a pointer into an object or one just past its
// end are all asked for without a fault, and nothing is written.
func TestLineNeverFaults(t *testing.T) {
	buf := make([]byte, 64)
	Line(nil)
	Line(unsafe.Pointer(&buf[0]))
	Line(unsafe.Add(unsafe.Pointer(&buf[0]), len(buf)))
	Line(unsafe.Add(unsafe.Pointer(&buf[0]), 1<<30))
	for i, b := range buf {
		if b != 0 {
			t.Fatalf("byte %d is %d after a prefetch", i, b)
		}
	}
}

// Lines asks for an object's lines, from anywhere in its first, and
// writes nothing.
func TestLinesWriteNothing(t *testing.T) {
	x := make([]uint64, 40) // 320 bytes: five lines, or six from an offset
	Lines(unsafe.Pointer(&x[0]), 5)
	Lines(unsafe.Pointer(&x[3]), 4)
	for i, v := range x {
		if v != 0 {
			t.Fatalf("word %d is %d after a prefetch", i, v)
		}
	}
}
