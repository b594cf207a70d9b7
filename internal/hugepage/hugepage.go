// Package hugepage asks the kernel to back the Go heap with huge pages.
//
// A simulation of thousands of connections reads a heap of hundreds of
// MiB at random, a few lines from each page it visits: on 4 KiB pages most
// of those reads also miss the TLB, and a page walk costs tens of
// nanoseconds more (in a virtual machine, where each walk is two, more
// still). Linux gives a process transparent huge pages where it asks for
// them (madvise mode, the default of many distributions), and the Go
// runtime does not ask.
package hugepage

// Reserve grows the heap by n bytes at once and frees them, then marks the
// heap's mapping, which now spans them, for huge pages: what the program
// allocates next fills it on huge pages as it touches it (freed memory is
// reused before the heap grows again). It returns the bytes of the mapping
// marked. Nothing the program sees changes: only how fast its memory is
// reached. Where the system has no transparent huge pages, or is not
// Linux, it returns an error and the heap is as it was.
func Reserve(n int) (int, error) { return reserve(n) }
