//go:build race

package udp

// raceEnabled is set under the race detector. It makes sync.Pool drop what
// is put back, so x/net's batch writer allocates. Allocation counts are
// therefore checked without it, and make test runs this package again
// without -race.
const raceEnabled = true
