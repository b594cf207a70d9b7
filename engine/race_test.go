//go:build race

package engine

// raceEnabled is set under the race detector.
const raceEnabled = true
