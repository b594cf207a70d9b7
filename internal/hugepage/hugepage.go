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
// marked. What the program computes does not change, only how fast its
// memory is reached and how much of it is resident: a huge page is
// resident whole, and the heap's address space stays n bytes larger.
//
// It does so once a process; later calls return the first's result. It
// does nothing and returns an error where the growth could fail (an
// address-space limit, strict overcommit, less than twice n of memory
// available: a failed allocation would end the program), where the kernel
// gives no huge pages (not Linux, transparent huge pages never) and where
// GODEBUG=disablethp=1 asks the runtime for none.
func Reserve(n int) (int, error) { return reserve(n) }
