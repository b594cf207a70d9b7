//go:build race

package udp

// raceEnabled: the race detector makes sync.Pool drop what is put back, so
// x/net's batch writer allocates; allocation counts are checked without it
// (make test runs this package again without -race).
const raceEnabled = true
