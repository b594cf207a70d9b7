// Package pathmgr will hold a connection's path table: per-path state (GOOD,
// SKIP, ASSUMED_BAD, DOWN), telemetry (RTT, ECN fraction, bytes, retransmits,
// utilization), repathing to fresh UDP source ports, and probing.
//
// Not built yet: this package has no code.
package pathmgr
