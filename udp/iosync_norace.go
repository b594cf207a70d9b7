//go:build !race

package udp

// ioRelease and ioAcquire tell the race detector of the order the kernel
// gives a datagram's send and read (iosync_race.go); without it they do
// nothing.
func ioRelease() {}
func ioAcquire() {}
