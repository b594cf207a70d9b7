// Package hugepage asks the kernel to back the Go heap with huge pages.
//
// A simulation of thousands of connections reads a heap of hundreds of
// MiB at random, a few lines from each page it visits. On 4 KiB pages most
// of those reads also miss the TLB, and each page walk costs tens of
// nanoseconds more, twice that in a virtual machine. In madvise mode, the
// default of many distributions, Linux gives a process transparent huge
// pages only where it asks for them, and the Go runtime does not ask.
package hugepage

// Reserve grows the heap by n bytes at once and frees them, then marks the
// heap's mapping, which now spans them, for huge pages. The runtime reuses
// freed memory before it grows the heap again, so what the program
// allocates next lands on huge pages as it touches it. Reserve returns the
// bytes of the mapping marked. What the program computes does not change,
// only how fast its memory is reached and how much of it is resident. A
// huge page is resident whole, and the heap's address space stays n bytes
// larger.
//
// It does so once a process, and later calls return the first's result.
// It does nothing and returns an error where the growth could fail, since
// a failed allocation would end the program. That is under an
// address-space limit, under strict overcommit, or with less than twice n
// of memory available. It also does nothing where the kernel gives no huge
// pages, off Linux or with transparent huge pages set to never, and where
// GODEBUG=disablethp=1 asks the runtime for none.
func Reserve(n int) (int, error) { return reserve(n) }
