package netem

import (
	"bytes"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/internal/pcapio"
	"github.com/mroce/mroce/link"
)

// A tap sees every verdict the counters count, with its cause, and a
// delivered datagram's events in order on its route.
func TestTapMatchesCounters(t *testing.T) {
	cfg := leafSpine(5, 8, 1, 4, 2)
	cfg.Downlink.Impair.Loss = &RandomLoss{P: 0.05}
	cfg.FabricUp.Queue = QueueConfig{ECNThreshold: 4 * kib, Limit: 64 * kib}
	f, sim := newTestFabric(t, cfg)
	verdicts := map[Verdict]uint64{}
	causes := map[DropCause]uint64{}
	last := map[uint64]Verdict{}
	f.AddTap(func(e *TapEvent) {
		verdicts[e.Verdict]++
		if e.Verdict == Dropped {
			causes[e.Cause]++
		}
		if e.Verdict == Delivered && last[e.ID] != Sent {
			t.Errorf("datagram %d delivered after %v, not sent", e.ID, last[e.ID])
		}
		last[e.ID] = e.Verdict
	})
	for h := 0; h < 4; h++ {
		sim.At(0, &pacer{f: f, sim: sim, src: h, dst: 4 + h, port: 50000, size: 1500, gap: 20 * time.Nanosecond,
			count: 2000, ecn: link.ECT0, portsPerDatagram: true})
	}
	sim.RunUntil(clock.Time(time.Second))
	var sent, marks, queued uint64
	for _, l := range f.Links() {
		st := l.Stats()
		sent += st.Packets
		marks += st.CEMarks
		queued += st.Enqueued
	}
	// A datagram lost on the wire finished transmission, and its record is
	// the drop.
	if verdicts[Sent]+causes[DropLoss] != sent || verdicts[Marked] != marks || verdicts[Queued]+verdicts[Marked] != queued ||
		verdicts[Delivered] != f.Delivered() || causes[DropLoss] == 0 || marks == 0 {
		t.Fatalf("tap saw %v (drops %v); counters: sent %d, marked %d, queued %d, delivered %d",
			verdicts, causes, sent, marks, queued, f.Delivered())
	}
	for c, n := range causes {
		var want uint64
		for _, l := range f.Links() {
			want += l.Stats().Drops[c]
		}
		if n != want {
			t.Errorf("tap saw %d %v drops, counters %d", n, c, want)
		}
	}
}

// A capture of a link holds what left it, ECN marks included, and reads back
// as a pcap.
func TestCaptureLink(t *testing.T) {
	up := simpleLink(gbps, time.Microsecond)
	up.Queue.ECNThreshold = 2000
	f, sim := newTestFabric(t, twoHosts(up, simpleLink(gbps, time.Microsecond)))
	var buf bytes.Buffer
	w, err := pcapio.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	origin := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := f.CaptureLink(f.Uplink(0, 0), w, origin)
	var batch []link.Datagram
	for i := 0; i < 10; i++ {
		batch = append(batch, datagram(f, 0, 1, 0, uint16(50000+i), 1000, uint32(i), link.ECT0))
	}
	f.Host(0).Send(batch)
	sim.RunUntil(clock.Time(time.Second))
	if c.Err() != nil || c.Packets() != 10 {
		t.Fatalf("capture: %d datagrams, error %v", c.Packets(), c.Err())
	}
	r, err := pcapio.NewReader(&buf, 4797)
	if err != nil {
		t.Fatal(err)
	}
	ce := 0
	var prev time.Time
	for i := 0; i < 10; i++ {
		d, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if d.SrcPort != uint16(50000+i) || d.Src != Addr(0, 0) || d.Dst != Addr(0, 1) || !d.Time.After(prev) {
			t.Errorf("datagram %d: %v:%d -> %v at %v", i, d.Src, d.SrcPort, d.Dst, d.Time)
		}
		prev = d.Time
		if d.ECN == link.CE {
			ce++
		}
	}
	// Datagram i >= 1 joins a queue of (i-1) × 1000 bytes, so CE marks start at i = 4.
	if ce != 6 {
		t.Errorf("%d CE-marked datagrams in the capture, want 6", ce)
	}
}
