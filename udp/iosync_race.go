//go:build race

package udp

import (
	"runtime"
	"unsafe"
)

// ioSync stands for the kernel between a datagram's sender and its reader.
// The batch system calls go around the standard library, which tells the
// race detector that a read follows the write it returns; without it, two
// hosts in one process that order their memory by the datagrams they
// exchange (a region placed, then acknowledged) look racy.
var ioSync byte

// ioRelease is called before a send.
func ioRelease() { runtime.RaceReleaseMerge(unsafe.Pointer(&ioSync)) }

// ioAcquire is called after a read that returned datagrams.
func ioAcquire() { runtime.RaceAcquire(unsafe.Pointer(&ioSync)) }
