package netem

import (
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// BenchmarkFabricTraversals loads a 64-host, 8-plane leaf-spine fabric with
// 8 hosts per leaf, 4 spines and 100 Gb/s links with ECN marking. Every
// host sends 4 KiB datagrams to a permutation partner on every plane, each
// with its own source port, at about 90% of line rate. It reports link
// traversals per second of wall time. A traversal is a datagram finishing
// transmission on one link.
func BenchmarkFabricTraversals(b *testing.B) {
	cfg := leafSpine(1, 64, 8, 8, 4)
	for _, l := range []*LinkConfig{&cfg.Uplink, &cfg.Downlink, &cfg.FabricUp, &cfg.FabricDown} {
		l.Queue = QueueConfig{Limit: 1 << 20, ECNThreshold: 100 * kib}
	}
	f, sim := newTestFabric(b, cfg)
	for h := 0; h < 64; h++ {
		f.Host(h).Attach(link.ReceiverFunc(func(*link.Datagram, clock.Time) {}))
	}
	for h := 0; h < 64; h++ {
		for p := 0; p < 8; p++ {
			sim.At(clock.Time(h*p), &pacer{f: f, sim: sim, src: h, dst: (h + 13) % 64, plane: p,
				port: uint16(49152 + 64*p), size: 4096, gap: 370 * time.Nanosecond, count: 1 << 30,
				ecn: link.ECT0, portsPerDatagram: true, noFill: true})
		}
	}
	sim.RunFor(100 * time.Microsecond) // fill the pipes
	traversals := func() uint64 {
		var n uint64
		for _, l := range f.Links() {
			n += l.stats.Packets
		}
		return n
	}
	start := traversals()
	b.ResetTimer()
	for b.Loop() {
		sim.RunFor(time.Microsecond)
	}
	b.StopTimer()
	n := traversals() - start
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "traversals/s")
	b.ReportMetric(float64(n)/float64(b.N), "traversals/op")
	b.ReportMetric(float64(sim.Pending()), "pending-events")
}
