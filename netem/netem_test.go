package netem

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

func twoHosts(up, down LinkConfig) Config {
	return Config{Seed: 1, Hosts: 2, Planes: 1, Uplink: up, Downlink: down}
}

// A datagram crosses uplink and downlink in serialization + delay each.
func TestDeliveryTime(t *testing.T) {
	f, sim := newTestFabric(t, twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, 2*time.Microsecond)))
	s := attachSink(f, 1)
	f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 0, 50000, 1184, 7, link.ECT0)})
	sim.RunUntil(clock.Time(time.Second))
	if len(s.got) != 1 {
		t.Fatalf("delivered %d datagrams", len(s.got))
	}
	// Each link takes (1184 + 66) bytes × 8 / 10 Gb/s = 1000 ns.
	want := clock.Time(1000 + 1000 + 1000 + 2000)
	if s.got[0].at != want || s.got[0].seq != 7 || s.got[0].size != 1184 || s.got[0].ecn != link.ECT0 {
		t.Fatalf("arrival %+v, want at %v", s.got[0], want)
	}
}

// A padded datagram carries a header and Pad bytes that are not
// materialized. It is its whole size on the wire. It is serialized, queued
// and counted as one of that many bytes, and delivered with its padding. If
// the padding makes it too large, it has no route. Its header buffer goes
// back to the header pool.
func TestPaddedDatagramIsItsWholeSize(t *testing.T) {
	f, sim := newTestFabric(t, twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, 2*time.Microsecond)))
	var got []link.Datagram
	f.Host(1).Attach(receiverFunc(func(d *link.Datagram, at clock.Time) {
		if at != clock.Time(1000+1000+1000+2000) { // as for TestDeliveryTime's 1184 bytes
			t.Errorf("arrived at %v", at)
		}
		got = append(got, link.Datagram{Data: slices.Clone(d.Data), Pad: d.Pad})
	}))
	header := f.Host(0).HeaderBuffer()
	if cap(header) != HeaderBufferLen {
		t.Fatalf("header buffer of %d bytes", cap(header))
	}
	d := datagram(f, 0, 1, 0, 50000, 0, 0, link.ECT0)
	f.recycle(f.procs[0], d.Data)
	d.Data, d.Pad = append(header, 1, 2, 3), 1181
	tooBig := d
	tooBig.Data, tooBig.Pad = f.Host(0).HeaderBuffer()[:10], int32(f.cfg.MaxDatagram-9)
	negative := d
	negative.Data, negative.Pad = f.Host(0).HeaderBuffer()[:10], -1
	huge := d // the most a Pad holds
	huge.Data, huge.Pad = f.Host(0).HeaderBuffer()[:10], math.MaxInt32-5
	f.Host(0).Send([]link.Datagram{d, tooBig, negative, huge})
	sim.RunUntil(clock.Time(time.Second))
	if len(got) != 1 || got[0].Pad != 1181 || !slices.Equal(got[0].Data, []byte{1, 2, 3}) || f.NoRoute() != 3 {
		t.Fatalf("delivered %+v, %d without a route", got, f.NoRoute())
	}
	if st := f.Uplink(0, 0).Stats(); st.Bytes != 1184 {
		t.Errorf("uplink counted %d bytes", st.Bytes)
	}
	if again := f.Host(0).HeaderBuffer(); cap(again) != HeaderBufferLen || &again[:1][0] != &header[:1][0] {
		t.Errorf("the header buffer was not recycled as one")
	}
}

// A link delivers its rate in virtual time. The remainder of every
// serialization is carried, so there is no drift even at 400 Gb/s, where a
// datagram takes a fractional number of nanoseconds.
func TestLinkRateExact(t *testing.T) {
	for _, rate := range []int64{10 * gbps, 100 * gbps, 400 * gbps} {
		const n, size = 20000, 4096
		f, sim := newTestFabric(t, twoHosts(simpleLink(rate, time.Microsecond), simpleLink(rate, time.Microsecond)))
		s := attachSink(f, 1)
		for i := 0; i < n; i++ {
			f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 0, 50000, size, uint32(i), link.ECT0)})
		}
		sim.RunUntil(clock.Time(time.Second))
		if len(s.got) != n {
			t.Fatalf("%d b/s: delivered %d of %d", rate, len(s.got), n)
		}
		// The datagrams leave the downlink back to back, so n-1
		// serializations lie between the first and last arrival.
		elapsed := float64(s.got[n-1].at - s.got[0].at)
		wireBits := float64((n - 1) * (size + DefaultOverhead) * 8)
		got := wireBits / elapsed * 1e9
		if e := math.Abs(got-float64(rate)) / float64(rate); e > 0.001 {
			t.Errorf("%d b/s link delivered %.0f b/s (error %.4f%%)", rate, got, 100*e)
		}
	}
}

func (c *countSink) Receive(*link.Datagram, clock.Time) { c.n++ }

// DCTCP step marking marks an ECN-capable datagram CE exactly when the
// queue it joins holds more than K bytes. Not-ECT datagrams are never marked.
func TestECNStepMarking(t *testing.T) {
	const size = 1000
	up := simpleLink(1*gbps, time.Microsecond)
	up.Queue.ECNThreshold = 3500 // between 3 and 4 datagrams
	f, sim := newTestFabric(t, twoHosts(up, simpleLink(100*gbps, time.Microsecond)))
	s := attachSink(f, 1)
	var batch []link.Datagram
	for i := 0; i < 12; i++ {
		ecn := link.ECT0
		if i == 9 {
			ecn = link.NotECT
		}
		batch = append(batch, datagram(f, 0, 1, 0, 50000, size, uint32(i), ecn))
	}
	f.Host(0).Send(batch)
	sim.RunUntil(clock.Time(time.Second))
	if len(s.got) != 12 {
		t.Fatalf("delivered %d", len(s.got))
	}
	for _, a := range s.got {
		// Datagram 0 goes straight to the wire, and datagram i >= 1 joins a
		// queue of (i-1) × size bytes.
		queued := 0
		if a.seq > 0 {
			queued = int(a.seq-1) * size
		}
		want := link.ECT0
		switch {
		case a.seq == 9:
			want = link.NotECT
		case queued > up.Queue.ECNThreshold:
			want = link.CE
		}
		if a.ecn != want {
			t.Errorf("datagram %d (queue %d bytes): %v, want %v", a.seq, queued, a.ecn, want)
		}
	}
	if got := f.Uplink(0, 0).Stats().CEMarks; got != 6 {
		t.Errorf("CE marks counted %d, want 6 (datagrams 5-8, 10, 11)", got)
	}
}

// A queue at its limit drops the datagrams that do not fit.
func TestTailDrop(t *testing.T) {
	up := simpleLink(1*gbps, time.Microsecond)
	up.Queue.Limit = 5000
	f, sim := newTestFabric(t, twoHosts(up, simpleLink(100*gbps, time.Microsecond)))
	s := attachSink(f, 1)
	var batch []link.Datagram
	for i := 0; i < 10; i++ {
		batch = append(batch, datagram(f, 0, 1, 0, 50000, 1000, uint32(i), link.ECT0))
	}
	f.Host(0).Send(batch)
	sim.RunUntil(clock.Time(time.Second))
	// One is on the wire, five fit the 5000-byte queue, and four are dropped.
	st := f.Uplink(0, 0).Stats()
	if len(s.got) != 6 || st.Drops[DropQueueFull] != 4 || st.QueueHighWater != 5000 {
		t.Fatalf("delivered %d, tail drops %d, high water %d", len(s.got), st.Drops[DropQueueFull], st.QueueHighWater)
	}
}

// A link with an MTU drops a larger datagram, as a router drops a packet
// with DF set, and carries one of exactly its MTU. Padding counts.
func TestLinkMTU(t *testing.T) {
	down := simpleLink(10*gbps, time.Microsecond)
	down.MTU = 1472
	f, sim := newTestFabric(t, twoHosts(simpleLink(10*gbps, time.Microsecond), down))
	s := attachSink(f, 1)
	padded := datagram(f, 0, 1, 0, 50000, 100, 3, link.ECT0)
	padded.Pad = 1373 // 1,473 bytes in all
	f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 0, 50000, 1472, 1, link.ECT0),
		datagram(f, 0, 1, 0, 50000, 1473, 2, link.ECT0), padded})
	sim.RunUntil(clock.Time(time.Second))
	st := f.Downlink(0, 1).Stats()
	if len(s.got) != 1 || s.got[0].seq != 1 || st.Drops[DropTooBig] != 2 {
		t.Fatalf("delivered %+v, %d dropped as too big", s.got, st.Drops[DropTooBig])
	}
	if DropTooBig.String() != "too-big" {
		t.Errorf("cause named %q", DropTooBig)
	}
	bad := twoHosts(simpleLink(10*gbps, time.Microsecond), down)
	bad.Uplink.MTU = -1
	if _, err := New(bad, clock.NewSim()); err == nil || !strings.Contains(err.Error(), "MTU = -1") {
		t.Fatalf("a negative MTU: %v", err)
	}
}

// Marking on dequeue between two thresholds: a datagram that leaves
// Max or more bytes behind it is marked, one that leaves Min or less is
// not, and one in between is marked at random. A Not-ECT datagram is never
// marked.
func TestECNRampOnDequeue(t *testing.T) {
	up := simpleLink(1*gbps, time.Microsecond)
	up.Queue.ECNRamp = &ECNRamp{Min: 2000, Max: 6000}
	f, sim := newTestFabric(t, twoHosts(up, simpleLink(100*gbps, time.Microsecond)))
	s := attachSink(f, 1)
	var batch []link.Datagram
	for i := 0; i < 10; i++ {
		batch = append(batch, datagram(f, 0, 1, 0, 50000, 1000, uint32(i), link.ECT0))
	}
	batch = append(batch, datagram(f, 0, 1, 0, 50000, 1000, 10, link.NotECT))
	f.Host(0).Send(batch)
	sim.RunUntil(clock.Time(time.Second))
	if len(s.got) != 11 {
		t.Fatalf("delivered %d", len(s.got))
	}
	// The first on the wire leaves at once, with the queue still growing;
	// the next ones leave 9,000 bytes and fewer behind them.
	for i, a := range s.got {
		left := 10000 - 1000*i // bytes behind datagram i when it left, the first excepted
		switch {
		case a.seq == 10 && a.ecn != link.NotECT:
			t.Errorf("the Not-ECT datagram arrived as %v", a.ecn)
		case i > 0 && a.seq != 10 && left >= 6000 && a.ecn != link.CE:
			t.Errorf("datagram %d left %d bytes behind, unmarked", a.seq, left)
		case i > 0 && a.seq != 10 && left <= 2000 && a.ecn == link.CE:
			t.Errorf("datagram %d left %d bytes behind, marked", a.seq, left)
		}
	}
	bad := twoHosts(up, up)
	bad.Uplink.Queue.ECNRamp = &ECNRamp{Min: 5, Max: 5}
	if _, err := New(bad, clock.NewSim()); err == nil || !strings.Contains(err.Error(), "ECN ramp") {
		t.Fatalf("an empty ramp: %v", err)
	}
}

// RED with ECN marks and never drops ECN-capable traffic. Without ECN it
// drops.
func TestRED(t *testing.T) {
	for _, ecn := range []bool{true, false} {
		up := simpleLink(1*gbps, time.Microsecond)
		up.Queue.RED = &RED{MinThreshold: 2000, MaxThreshold: 20000, MaxProb: 0.5, Weight: 0.5, ECN: ecn}
		f, sim := newTestFabric(t, twoHosts(up, simpleLink(100*gbps, time.Microsecond)))
		s := attachSink(f, 1)
		var batch []link.Datagram
		for i := 0; i < 100; i++ {
			batch = append(batch, datagram(f, 0, 1, 0, 50000, 1000, uint32(i), link.ECT0))
		}
		f.Host(0).Send(batch)
		sim.RunUntil(clock.Time(time.Second))
		st := f.Uplink(0, 0).Stats()
		if ecn && (st.Drops[DropRED] != 0 || st.CEMarks == 0 || len(s.got) != 100) {
			t.Errorf("RED+ECN: drops %d, marks %d, delivered %d", st.Drops[DropRED], st.CEMarks, len(s.got))
		}
		if !ecn && (st.Drops[DropRED] == 0 || st.CEMarks != 0 || len(s.got)+int(st.Drops[DropRED]) != 100) {
			t.Errorf("RED without ECN: drops %d, marks %d, delivered %d", st.Drops[DropRED], st.CEMarks, len(s.got))
		}
	}
}

// Incast on a lossless fabric with PFC and finite buffers drops nothing
// anywhere. The congested node pauses its upstream links for a measured
// time, and everything arrives.
func TestPFCIncastIsLossless(t *testing.T) {
	const senders, each, size = 8, 200, 4096
	up := simpleLink(100*gbps, time.Microsecond)
	up.Queue.PFC = &PFC{XOff: 40 * kib, XOn: 20 * kib}
	down := simpleLink(100*gbps, time.Microsecond)
	// The headroom is XOff per sender, plus what is on the wire while a
	// pause travels, 2 × delay × rate, and the datagram in serialization.
	down.Queue.Limit = senders * (40*kib + 2*25_000 + 2*size)
	f, sim := newTestFabric(t, Config{Seed: 3, Hosts: senders + 1, Planes: 1, Uplink: up, Downlink: down})
	s := attachSink(f, senders)
	for h := 0; h < senders; h++ {
		var batch []link.Datagram
		for i := 0; i < each; i++ {
			batch = append(batch, datagram(f, h, senders, 0, uint16(50000+h), size, uint32(i), link.ECT0))
		}
		f.Host(h).Send(batch)
	}
	sim.RunUntil(clock.Time(time.Second))
	if len(s.got) != senders*each {
		t.Fatalf("delivered %d of %d", len(s.got), senders*each)
	}
	var pause time.Duration
	for _, l := range f.Links() {
		st := l.Stats()
		if n := st.dropsTotal(); n != 0 {
			t.Errorf("link %d (%v) dropped %d", l.ID(), l.Kind(), n)
		}
		pause += st.PauseTime
	}
	if pause <= 0 {
		t.Fatal("no upstream link was ever paused")
	}
	t.Logf("uplinks paused %v in total; receiver queue peak %d bytes",
		pause, f.Downlink(0, senders).Stats().QueueHighWater)
}

// The same incast without PFC and with the same buffer drops.
func TestIncastWithoutPFCDrops(t *testing.T) {
	const senders, each, size = 8, 200, 4096
	down := simpleLink(100*gbps, time.Microsecond)
	down.Queue.Limit = 64 * kib
	f, sim := newTestFabric(t, Config{Seed: 3, Hosts: senders + 1, Planes: 1,
		Uplink: simpleLink(100*gbps, time.Microsecond), Downlink: down})
	for h := 0; h < senders; h++ {
		var batch []link.Datagram
		for i := 0; i < each; i++ {
			batch = append(batch, datagram(f, h, senders, 0, uint16(50000+h), size, uint32(i), link.ECT0))
		}
		f.Host(h).Send(batch)
	}
	sim.RunUntil(clock.Time(time.Second))
	if f.Downlink(0, senders).Stats().Drops[DropQueueFull] == 0 {
		t.Fatal("a lossy incast into a 64 KiB buffer dropped nothing")
	}
}

func leafSpine(seed uint64, hosts, planes, perLeaf, spines int) Config {
	l := simpleLink(100*gbps, time.Microsecond)
	return Config{Seed: seed, Hosts: hosts, Planes: planes, HostsPerLeaf: perLeaf, Spines: spines,
		Uplink: l, Downlink: l, FabricUp: l, FabricDown: l}
}

// traceRun is a busy, impaired leaf-spine run whose every random choice
// comes from the seed. It returns the trace hash.
func traceRun(t testing.TB, seed uint64) uint64 {
	cfg := leafSpine(seed, 16, 2, 4, 4)
	cfg.Trace = true
	cfg.Downlink.Impair = Impairments{Loss: &GilbertElliott{P: 0.01, R: 0.3, LossBad: 1},
		Jitter: time.Microsecond, Distribution: Normal, Duplicate: 0.01, Corrupt: 0.01, Reorder: 0.01, ReorderGap: 3 * time.Microsecond}
	cfg.FabricUp.Queue = QueueConfig{Limit: 64 * kib, ECNThreshold: 16 * kib}
	cfg.Faults = []Fault{{At: 200 * time.Microsecond, Kind: PlaneBlackhole, Plane: 1}, {At: 400 * time.Microsecond, Kind: Repair, Plane: 1}}
	f, sim := newTestFabric(t, cfg)
	for h := 0; h < 16; h++ {
		for p := 0; p < 2; p++ {
			sim.At(0, &pacer{f: f, sim: sim, src: h, dst: (h*5 + 3) % 16, plane: p, port: uint16(50000 + 100*h),
				size: 2048, gap: 150 * time.Nanosecond, count: 400, ecn: link.ECT0, portsPerDatagram: true})
		}
	}
	sim.RunUntil(clock.Time(10 * time.Millisecond))
	return f.TraceHash()
}

// The golden trace hash pins the emulator's behaviour. Any change to event
// order, routing, randomness or impairments changes it. When a change is
// intended, update the constant and say why in the commit.
const goldenTraceHash = 0x90173a58751e4648

func TestDeterministicTrace(t *testing.T) {
	a, b := traceRun(t, 7), traceRun(t, 7)
	if a != b {
		t.Fatalf("two runs with seed 7: trace %#x then %#x", a, b)
	}
	if c := traceRun(t, 8); c == a {
		t.Fatalf("seeds 7 and 8 gave the same trace %#x", a)
	}
	if a != goldenTraceHash {
		t.Errorf("trace hash %#x, golden %#x", a, uint64(goldenTraceHash))
	}
}

// Duplication and corruption each hit their share of datagrams, and a
// corrupted datagram that is then duplicated arrives corrupted twice.
func TestDuplicationAndCorruption(t *testing.T) {
	down := simpleLink(100*gbps, time.Microsecond)
	down.Impair.Duplicate = 0.1
	down.Impair.Corrupt = 0.1
	f, sim := newTestFabric(t, twoHosts(simpleLink(100*gbps, time.Microsecond), down))
	const n, size = 20000, 256
	intact, corrupted := 0, 0
	f.Host(1).Attach(link.ReceiverFunc(func(d *link.Datagram, _ clock.Time) {
		ok := true
		for i := 4; i < len(d.Data); i++ {
			if d.Data[i] != byte(i) {
				ok = false
			}
		}
		if ok {
			intact++
		} else {
			corrupted++
		}
	}))
	sim.At(0, &pacer{f: f, sim: sim, src: 0, dst: 1, port: 50000, size: size, gap: 50 * time.Nanosecond, count: n})
	sim.RunUntil(clock.Time(time.Second))
	st := f.Downlink(0, 1).Stats()
	if total := intact + corrupted; uint64(total) != n+st.Duplicated {
		t.Fatalf("delivered %d, want %d sent + %d duplicates", total, n, st.Duplicated)
	}
	// This sink does not detect flips in the first 4 bytes, which hold the
	// sequence number. They are 4/256 of all flips.
	if math.Abs(float64(st.Duplicated)-0.1*n) > 4*math.Sqrt(0.09*n) {
		t.Errorf("duplicated %d of %d", st.Duplicated, n)
	}
	// A corrupted datagram that is then duplicated arrives corrupted twice.
	if c := float64(st.Corrupted); math.Abs(c-0.1*n) > 4*math.Sqrt(0.09*n) ||
		uint64(corrupted) < st.Corrupted*9/10 || uint64(corrupted) > st.Corrupted+st.Duplicated {
		t.Errorf("corrupted %d (link) / %d (seen)", st.Corrupted, corrupted)
	}
}

// Jitter never reorders. The reorder impairment does, at about its rate.
func TestJitterKeepsOrderReorderDoesNot(t *testing.T) {
	for _, reorder := range []float64{0, 0.05} {
		down := simpleLink(100*gbps, 10*time.Microsecond)
		down.Impair = Impairments{Jitter: 5 * time.Microsecond, Distribution: Pareto, Reorder: reorder, ReorderGap: 20 * time.Microsecond}
		f, sim := newTestFabric(t, twoHosts(simpleLink(100*gbps, time.Microsecond), down))
		s := attachSink(f, 1)
		sim.At(0, &pacer{f: f, sim: sim, src: 0, dst: 1, port: 50000, size: 512, gap: 200 * time.Nanosecond, count: 5000})
		sim.RunUntil(clock.Time(time.Second))
		late := 0
		for i := 1; i < len(s.got); i++ {
			if s.got[i].seq < s.got[i-1].seq {
				late++
			}
		}
		if reorder == 0 && late != 0 {
			t.Errorf("jitter alone reordered %d datagrams", late)
		}
		if reorder > 0 && (late < 150 || late > 350) {
			t.Errorf("5%% reordering of 5000 reordered %d", late)
		}
	}
}

// A datagram to another plane, from a spoofed source or larger than
// MaxDatagram has no route and is counted in NoRoute.
func TestNoRoute(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, 0), simpleLink(10*gbps, 0))
	cfg.Planes = 2
	f, sim := newTestFabric(t, cfg)
	s := attachSink(f, 1)
	d := datagram(f, 0, 1, 0, 1, 100, 0, link.ECT0)
	cross := d
	cross.Dst = datagram(f, 0, 1, 1, 1, 0, 0, 0).Dst // a plane-1 address
	spoof := datagram(f, 1, 1, 0, 1, 100, 0, link.ECT0)
	big := datagram(f, 0, 1, 0, 1, 0, 0, link.ECT0)
	big.Data = make([]byte, 9001)
	f.Host(0).Send([]link.Datagram{cross, spoof, big, d})
	sim.RunUntil(clock.Time(time.Second))
	if f.NoRoute() != 3 || len(s.got) != 1 {
		t.Fatalf("no route %d, delivered %d", f.NoRoute(), len(s.got))
	}
}

// A bad configuration is refused with an error naming what is wrong.
func TestBadConfig(t *testing.T) {
	good := twoHosts(simpleLink(gbps, 0), simpleLink(gbps, 0))
	for _, c := range []struct {
		name, want string
		edit       func(*Config)
	}{
		{"negative rate", "rate = -5", func(c *Config) { c.Uplink.Rate = -5 }},
		{"zero rate", "rate = 0", func(c *Config) { c.Downlink.Rate = 0 }},
		{"loss above 1", "random loss P = 1.5", func(c *Config) { c.Downlink.Impair.Loss = &RandomLoss{P: 1.5} }},
		{"NaN loss", "random loss P = NaN", func(c *Config) { c.Downlink.Impair.Loss = &RandomLoss{P: math.NaN()} }},
		{"no hosts", "hosts = 0", func(c *Config) { c.Hosts = 0 }},
		{"9 planes", "planes = 9", func(c *Config) { c.Planes = 9 }},
		{"unknown plane in fault", "plane 3", func(c *Config) { c.Faults = []Fault{{Kind: PlaneDown, Plane: 3}} }},
		{"unknown host in fault", "host 7", func(c *Config) {
			c.Faults = []Fault{{Kind: LinkSlowdown, Factor: 0.5, Link: &LinkMatch{Kind: Uplink, Host: 7}}}
		}},
		{"slowdown factor", "factor 2", func(c *Config) { c.Faults = []Fault{{Kind: LinkSlowdown, Factor: 2}} }},
		{"fault MTU", "MTU 70000", func(c *Config) { c.Faults = []Fault{{Kind: LinkMTU, MTU: 70000}} }},
		{"fault loss", "random loss P = 2", func(c *Config) { c.Faults = []Fault{{Kind: LinkLoss, Loss: &RandomLoss{P: 2}}} }},
		{"leaf-spine without spines", "spines = 0", func(c *Config) { c.HostsPerLeaf = 1 }},
		{"negative delay", "delay = -1ns", func(c *Config) { c.Uplink.Delay = -1 }},
		{"RED thresholds", "RED thresholds", func(c *Config) { c.Uplink.Queue.RED = &RED{MinThreshold: 10, MaxThreshold: 5} }},
		{"PFC thresholds", "PFC XOff", func(c *Config) { c.Uplink.Queue.PFC = &PFC{XOff: 1, XOn: 2} }},
	} {
		cfg := good
		c.edit(&cfg)
		_, err := New(cfg, clock.NewSim())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := New(good, clock.NewSim()); err != nil {
		t.Fatalf("good config refused: %v", err)
	}
}

// Steady state moves datagrams without allocating. Buffers, packets and
// events are recycled.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	f, sim := newTestFabric(t, leafSpine(1, 16, 1, 4, 4))
	attachSink(f, 9).got = make([]arrival, 0, 1<<16)
	send := func() {
		f.Host(2).Send([]link.Datagram{datagram(f, 2, 9, 0, 50001, 1024, 1, link.ECT0)})
		sim.RunUntil(sim.Now() + clock.Time(10*time.Microsecond))
	}
	for i := 0; i < 100; i++ {
		send()
	}
	if n := testing.AllocsPerRun(1000, send); n != 0 {
		t.Fatalf("%.2f allocations per datagram", n)
	}
}

// An override gives one plane's downlinks a longer delay.
func TestOverrides(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, time.Microsecond))
	cfg.Planes = 2
	cfg.Overrides = []Override{{Plane: 1, Match: LinkMatch{Kind: Downlink, Host: -1, Leaf: -1, Spine: -1},
		Link: simpleLink(10*gbps, 50*time.Microsecond)}}
	f, sim := newTestFabric(t, cfg)
	s := attachSink(f, 1)
	f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 0, 1, 1184, 0, 0), datagram(f, 0, 1, 1, 1, 1184, 1, 0)})
	sim.RunUntil(clock.Time(time.Second))
	if len(s.got) != 2 || s.got[0].at != 4000 || s.got[1].at != 53000 {
		t.Fatalf("arrivals %+v: want plane 0 at 4µs, plane 1 at 53µs", s.got)
	}
	cfg.Overrides[0].Plane = 5
	if _, err := New(cfg, clock.NewSim()); err == nil || !strings.Contains(err.Error(), "override 0: plane 5") {
		t.Fatalf("override of an unknown plane: %v", err)
	}
}

// BytesTo counts what each plane delivered to a host.
func TestBytesToCountsPerPlane(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, time.Microsecond))
	cfg.Planes = 3
	f, sim := newTestFabric(t, cfg)
	attachSink(f, 1)
	f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 1, 50000, 1000, 1, link.ECT0), datagram(f, 0, 1, 1, 50001, 500, 2, link.ECT0),
		datagram(f, 0, 1, 2, 50000, 300, 3, link.ECT0)})
	sim.RunUntil(clock.Time(time.Second))
	if got := f.BytesTo(1); fmt.Sprint(got) != "[0 1500 300]" {
		t.Fatalf("bytes per plane %v, want [0 1500 300]", got)
	}
	if got := f.BytesTo(0); fmt.Sprint(got) != "[0 0 0]" {
		t.Fatalf("the sender received %v", got)
	}
}

// incastInto sends count datagrams of size bytes from every host of
// senders to dst, all at time 0.
func incastInto(f *Fabric, senders []int, dst, count, size int) {
	for _, h := range senders {
		var batch []link.Datagram
		for i := 0; i < count; i++ {
			batch = append(batch, datagram(f, h, dst, 0, uint16(50000+h), size, uint32(i), link.ECT0))
		}
		f.Host(h).Send(batch)
	}
}

// A switch's shared buffer holds one congested queue to Alpha/(1+Alpha) of
// it, and two congested queues to Alpha/(1+2·Alpha) each, whatever their
// own limits; what does not fit is dropped as over the queue's share.
func TestSharedBufferDynamicThreshold(t *testing.T) {
	const size, buffer = 4096, 1 << 20
	for _, c := range []struct {
		alpha float64
		dsts  int // congested downlinks, 4 senders each
	}{{1, 1}, {1, 2}, {0.5, 1}, {2, 2}} {
		cfg := Config{Seed: 3, Hosts: 10, Planes: 1, Uplink: simpleLink(100*gbps, time.Microsecond),
			Downlink:     LinkConfig{Rate: 100 * gbps, Delay: time.Microsecond, Queue: QueueConfig{Limit: 16 << 20}},
			SharedBuffer: &SharedBuffer{Bytes: buffer, Alpha: c.alpha}}
		f, sim := newTestFabric(t, cfg)
		for d := 0; d < c.dsts; d++ {
			incastInto(f, []int{4 * d, 4*d + 1, 4*d + 2, 4*d + 3}, 8+d, 200, size)
		}
		sim.RunUntil(clock.Time(time.Second))
		share := c.alpha / (1 + float64(c.dsts)*c.alpha) * buffer
		for d := 0; d < c.dsts; d++ {
			st := f.Downlink(0, 8+d).Stats()
			if hw := float64(st.QueueHighWater); hw < share-2*size || hw > share+2*size {
				t.Errorf("alpha %g, %d congested: queue %d peaked at %.0f bytes, want %.0f within two packets", c.alpha, c.dsts, d, hw, share)
			}
			if st.Drops[DropSharedBuffer] == 0 || st.Drops[DropQueueFull] != 0 {
				t.Errorf("alpha %g, %d congested: queue %d drops %v, want some over its share and none at its limit", c.alpha, c.dsts, d, st.Drops)
			}
		}
	}
}

// Without a shared buffer the same incast fills the queue to its own limit.
func TestWithoutSharedBufferTheLimitHolds(t *testing.T) {
	cfg := Config{Seed: 3, Hosts: 10, Planes: 1, Uplink: simpleLink(100*gbps, time.Microsecond),
		Downlink: LinkConfig{Rate: 100 * gbps, Delay: time.Microsecond, Queue: QueueConfig{Limit: 1 << 20}}}
	f, sim := newTestFabric(t, cfg)
	incastInto(f, []int{0, 1, 2, 3}, 8, 200, 4096)
	sim.RunUntil(clock.Time(time.Second))
	st := f.Downlink(0, 8).Stats()
	if st.QueueHighWater < 1<<20-4096 || st.Drops[DropSharedBuffer] != 0 || st.Drops[DropQueueFull] == 0 {
		t.Fatalf("peak %d, drops %v: want the 1 MiB limit reached and tail drops", st.QueueHighWater, st.Drops)
	}
}

// A shared buffer needs bytes and an alpha above 0 (TestGroupedRefuses
// checks that it keeps a fabric on one clock).
func TestSharedBufferIsChecked(t *testing.T) {
	for _, b := range []SharedBuffer{{0, 1}, {1 << 20, 0}, {1 << 20, -1}} {
		cfg := Config{Hosts: 2, Planes: 1, Uplink: simpleLink(gbps, time.Microsecond), Downlink: simpleLink(gbps, time.Microsecond), SharedBuffer: &b}
		if _, err := New(cfg, clock.NewSim()); err == nil || !strings.Contains(err.Error(), "shared buffer") {
			t.Errorf("%+v: %v, want a shared-buffer error", b, err)
		}
	}
}

// Every link that leaves one switch shares that switch's buffer, and no
// other's: per plane on a leaf-spine, and across the planes for the leaf
// of single-port hosts, whose downlinks belong to no plane.
func TestSharedBufferPerSwitch(t *testing.T) {
	for _, single := range []bool{false, true} {
		cfg := leafSpine(1, 8, 2, 4, 2)
		cfg.SinglePort = single
		cfg.SharedBuffer = &SharedBuffer{Bytes: 1 << 20, Alpha: 1}
		f, _ := newTestFabric(t, cfg)
		pools := map[*bufferPool][]*Link{}
		for _, l := range f.Links() {
			if l.Kind() == Uplink {
				if l.pool != nil {
					t.Fatalf("single %v: a host's uplink %d shares a switch buffer", single, l.ID())
				}
				continue
			}
			pools[l.pool] = append(pools[l.pool], l)
		}
		// Per plane: 2 leaves and 2 spines; single-port leaves serve both planes.
		want := 2 * (2 + 2)
		if single {
			want = 2 + 2*2
		}
		if len(pools) != want {
			t.Errorf("single %v: %d buffers, want %d", single, len(pools), want)
		}
		for _, ls := range pools {
			from, leaf := ls[0].From(), ls[0].Kind() == Downlink || ls[0].Kind() == FabricUp
			for _, l := range ls {
				if l.From() != from || (l.Kind() == Downlink || l.Kind() == FabricUp) != leaf || !single && l.Plane() != ls[0].Plane() {
					t.Errorf("single %v: links %d and %d share a buffer but leave different switches", single, ls[0].ID(), l.ID())
				}
			}
		}
	}
}
