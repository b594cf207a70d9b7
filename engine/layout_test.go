package engine

import (
	"testing"
	"unsafe"
)

// A sender's paths are an array of whole cache lines, so that each path's
// first line holds what choosing a path reads (sendPath): a field added
// without adjusting sendPathPad would shift every path off its lines.
func TestSendPathIsWholeLines(t *testing.T) {
	if got := unsafe.Sizeof(sendPath{}); got != sendPathSize {
		t.Fatalf("a sendPath is %d bytes, want %d: adjust sendPathPad", got, sendPathSize)
	}
	if off := unsafe.Offsetof(sendPath{}.plane) + unsafe.Sizeof(sendPath{}.plane); off > 64 {
		t.Fatalf("what choosing a path reads ends at byte %d, past the first line", off)
	}
}
