// Package netem is mroce's network emulator. It builds a deterministic
// multi-plane fabric of hosts, switches and links, and carries datagrams
// across it. Its links have queues with ECN marking, optional PFC, loss
// models and other impairments, and faults change them at scheduled times.
// ECMP hashes the UDP 5-tuple, so the source port picks a path. The fabric
// runs on any Scheduler. Over a clock.Sim it runs in virtual time, over a
// clock.Loop in real time, and over a parallel.Group split across the
// cores. tunnet puts it behind TUN devices.
package netem
