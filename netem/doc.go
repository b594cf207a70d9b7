// Package netem will be mroce's network emulator: a deterministic multi-plane
// fabric (ECMP on the UDP source port, loss models, queues with ECN marking,
// optional PFC, scheduled faults) in virtual time, in real time in process,
// and behind TUN devices.
//
// Not built yet: this package has no code.
package netem
