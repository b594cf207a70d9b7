package netem

import (
	"fmt"
	"math"
	"math/rand/v2"
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
	// (1184 + 66) bytes x 8 / 10 Gb/s = 1000 ns per link.
	want := clock.Time(1000 + 1000 + 1000 + 2000)
	if s.got[0].at != want || s.got[0].seq != 7 || s.got[0].size != 1184 || s.got[0].ecn != link.ECT0 {
		t.Fatalf("arrival %+v, want at %v", s.got[0], want)
	}
}

// A link delivers its rate in virtual time: the remainder of every
// serialization is carried, so there is no drift even at 400 Gb/s where a
// datagram takes a fractional number of nanoseconds.
// A padded datagram (a header and Pad bytes not materialized) is its whole
// size on the wire: serialized, queued and counted as one of that many
// bytes, delivered with its padding; too large with it, it has no route.
// Its header buffer goes back to the header pool.
func TestPaddedDatagramIsItsWholeSize(t *testing.T) {
	f, sim := newTestFabric(t, twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, 2*time.Microsecond)))
	var got []link.Datagram
	f.Host(1).Attach(receiverFunc(func(d *link.Datagram, at clock.Time) {
		if at != clock.Time(1000+1000+1000+2000) { // as TestDeliveryTime's 1184 bytes
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
		// Back to back on the downlink: n-1 serializations between the first
		// and last arrival.
		elapsed := float64(s.got[n-1].at - s.got[0].at)
		wireBits := float64((n - 1) * (size + DefaultOverhead) * 8)
		got := wireBits / elapsed * 1e9
		if e := math.Abs(got-float64(rate)) / float64(rate); e > 0.001 {
			t.Errorf("%d b/s link delivered %.0f b/s (error %.4f%%)", rate, got, 100*e)
		}
	}
}

// Bernoulli loss over 10^6 datagrams through the fabric stays inside a
// 4-sigma binomial bound, and every loss is counted as such.
func TestLargeRandomLossBinomial(t *testing.T) {
	if testing.Short() {
		t.Skip("10^6 datagrams: run without -short")
	}
	const n, p = 1_000_000, 0.01
	down := simpleLink(100*gbps, time.Microsecond)
	down.Impair.Loss = &RandomLoss{P: p}
	f, sim := newTestFabric(t, twoHosts(simpleLink(100*gbps, time.Microsecond), down))
	s := &countSink{}
	f.Host(1).Attach(s)
	sim.At(0, &pacer{f: f, sim: sim, src: 0, dst: 1, port: 50000, size: 64, gap: 10 * time.Nanosecond, count: n})
	sim.RunUntil(clock.Time(time.Second))
	lost := f.Downlink(0, 1).Stats().Drops[DropLoss]
	if s.n+lost != n {
		t.Fatalf("delivered %d + lost %d != sent %d", s.n, lost, n)
	}
	mean, sd := n*p, math.Sqrt(n*p*(1-p))
	if math.Abs(float64(lost)-mean) > 4*sd {
		t.Fatalf("lost %d of %d: outside %.0f +- 4 x %.1f", lost, n, mean, sd)
	}
}

type countSink struct{ n uint64 }

func (c *countSink) Receive(*link.Datagram, clock.Time) { c.n++ }

func TestLossModelRates(t *testing.T) {
	const n = 400_000
	models := []LossModel{
		&RandomLoss{P: 0.05},
		&GilbertElliott{P: 0.01, R: 0.25, LossBad: 1},
		&GilbertElliott{P: 0.02, R: 0.1, LossGood: 0.001, LossBad: 0.7},
		&FourState{P13: 0.002, P31: 0.3, P32: 0.2, P23: 0.1, P14: 0.01},
	}
	for i, m := range models {
		rng := rand.New(rand.NewPCG(uint64(i), 9))
		lost := 0
		for j := 0; j < n; j++ {
			if m.Lose(rng, 0) {
				lost++
			}
		}
		got, want := float64(lost)/n, m.Rate()
		// Burst models have correlated samples: allow a generous 10% relative
		// error, still far tighter than a wrong formula would give.
		if math.Abs(got-want) > 0.1*want {
			t.Errorf("model %d (%T): loss rate %.5f, formula %.5f", i, m, got, want)
		}
	}
}

// Timed bursts: a steady stream loses BadTime / (GoodTime + BadTime) of
// its packets, in bursts that last BadTime on average; and a burst ends on
// time on a link that carries nothing (a packet after a long quiet spell
// is lost with the stationary probability, where a Gilbert-Elliott link
// left in its bad state would still lose it).
func TestTimedBursts(t *testing.T) {
	m := &TimedBursts{GoodTime: 9 * time.Microsecond, BadTime: time.Microsecond, LossBad: 1}
	rng := rand.New(rand.NewPCG(5, 6))
	const gap = 100 * time.Nanosecond
	lost, bursts, inBurst := 0, 0, false
	const n = 2_000_000
	for i := range n {
		l := m.Lose(rng, clock.Time(i)*clock.Time(gap))
		if l {
			lost++
		}
		if l && !inBurst {
			bursts++
		}
		inBurst = l
	}
	rate, burst := float64(lost)/n, time.Duration(float64(lost)/float64(bursts)*float64(gap))
	if math.Abs(rate-m.Rate()) > 0.05*m.Rate() || burst < 900*time.Nanosecond || burst > 1100*time.Nanosecond {
		t.Errorf("loss %.4f (formula %.4f), mean burst %v (BadTime %v)", rate, m.Rate(), burst, m.BadTime)
	}
	// The share of packets lost a quiet spell after a burst began: trials
	// of a fresh link sent packets until one is lost, then one more.
	lostAfterQuiet := func(quiet time.Duration, seed uint64) float64 {
		const trials = 4000
		lost := 0
		for i := range trials {
			q := m.clone().(*TimedBursts)
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			at := clock.Time(0)
			for !q.Lose(r, at) { // into a burst
				at += clock.Time(gap)
			}
			if q.Lose(r, at+clock.Time(quiet)) {
				lost++
			}
		}
		return float64(lost) / trials
	}
	if got := lostAfterQuiet(time.Second, 7); math.Abs(got-0.1) > 0.02 {
		t.Errorf("after a quiet second in a burst, %.3f of packets lost: want the stationary 0.1", got)
	}
	// After a quiet microsecond the chain has not forgotten the burst:
	// lost with 0.1 + 0.9 exp(-(1/9 + 1/1) x 1) = 0.396.
	if got, want := lostAfterQuiet(time.Microsecond, 8), 0.1+0.9*math.Exp(-(1.0/9+1)); math.Abs(got-want) > 0.03 {
		t.Errorf("after a quiet microsecond in a burst, %.3f of packets lost: want %.3f", got, want)
	}
	if (&TimedBursts{GoodTime: time.Microsecond}).validate() == nil {
		t.Error("a zero BadTime accepted")
	}
}

// In the simple Gilbert model (LossBad 1, LossGood 0) loss bursts are
// geometric with mean 1/R.
func TestGilbertElliottBurstLength(t *testing.T) {
	for _, r := range []float64{0.5, 0.25, 0.1} {
		m := &GilbertElliott{P: 0.01, R: r, LossBad: 1}
		rng := rand.New(rand.NewPCG(42, uint64(r*100)))
		bursts, lostTotal, run := 0, 0, 0
		for i := 0; i < 2_000_000; i++ {
			if m.Lose(rng, 0) {
				run++
				lostTotal++
				continue
			}
			if run > 0 {
				bursts++
				run = 0
			}
		}
		got, want := float64(lostTotal)/float64(bursts), 1/r
		if math.Abs(got-want) > 0.05*want {
			t.Errorf("R=%v: mean burst %.3f, formula 1/R = %.3f", r, got, want)
		}
	}
}

// DCTCP step marking: an ECN-capable datagram is marked CE exactly when the
// queue it joins holds more than K bytes; Not-ECT datagrams are never marked.
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
		// Datagram 0 goes straight to the wire; datagram i >= 1 joins a
		// queue of (i-1) x size bytes.
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
	// One on the wire, five fit the 5000-byte queue, four dropped.
	st := f.Uplink(0, 0).Stats()
	if len(s.got) != 6 || st.Drops[DropQueueFull] != 4 || st.QueueHighWater != 5000 {
		t.Fatalf("delivered %d, tail drops %d, high water %d", len(s.got), st.Drops[DropQueueFull], st.QueueHighWater)
	}
}

// RED with ECN marks and never drops ECN-capable traffic; without ECN it drops.
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

// Incast on a lossless (PFC) fabric with finite buffers: nothing is dropped
// anywhere, the congested node pauses its upstream links for a measured
// time, and everything arrives.
func TestPFCIncastIsLossless(t *testing.T) {
	const senders, each, size = 8, 200, 4096
	up := simpleLink(100*gbps, time.Microsecond)
	up.Queue.PFC = &PFC{XOff: 40 * kib, XOn: 20 * kib}
	down := simpleLink(100*gbps, time.Microsecond)
	// Headroom: XOff per sender, plus what is on the wire while a pause
	// travels (2 x delay x rate) and the datagram in serialization.
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

// A 5-tuple always takes the same spine, the one Spine reports; 256 source
// ports spread over 8 spines within a 3-sigma binomial bound (32 +- 16).
func TestECMPSpreadAndStability(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		f, sim := newTestFabric(t, leafSpine(seed, 16, 1, 8, 8))
		counts := make([]int, 8)
		for port := 0; port < 256; port++ {
			d := datagram(f, 0, 12, 0, uint16(49152+port), 100, 0, link.ECT0)
			s := f.Spine(d.Src, d.Dst)
			for rep := 0; rep < 3; rep++ {
				if again := f.Spine(d.Src, d.Dst); again != s {
					t.Fatalf("seed %d port %d: spine %d then %d", seed, port, s, again)
				}
			}
			counts[s]++
			before := f.FabricLink(0, 0, s, true).Stats().Packets
			f.Host(0).Send([]link.Datagram{d})
			sim.RunUntil(sim.Now() + clock.Time(time.Millisecond))
			if f.FabricLink(0, 0, s, true).Stats().Packets != before+1 {
				t.Fatalf("seed %d port %d: the datagram did not cross spine %d", seed, port, s)
			}
		}
		for s, c := range counts {
			if c < 16 || c > 48 {
				t.Errorf("seed %d: spine %d got %d of 256 ports, outside 32 +- 16", seed, s, c)
			}
		}
	}
}

// Spines are picked per seed: two seeds send some 5-tuple different ways.
func TestECMPDependsOnSeed(t *testing.T) {
	a, _ := newTestFabric(t, leafSpine(1, 16, 1, 8, 8))
	b, _ := newTestFabric(t, leafSpine(2, 16, 1, 8, 8))
	differ := 0
	for port := 0; port < 64; port++ {
		d := datagram(a, 0, 12, 0, uint16(49152+port), 10, 0, link.ECT0)
		if a.Spine(d.Src, d.Dst) != b.Spine(d.Src, d.Dst) {
			differ++
		}
	}
	if differ < 32 {
		t.Fatalf("only %d of 64 tuples change spine with the seed", differ)
	}
}

// traceRun is a busy, impaired leaf-spine run whose every random choice comes
// from the seed; it returns the trace hash.
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

// The golden trace hash pins the emulator's behaviour: any change to event
// order, routing, randomness or impairments changes it. When a change is
// intended, update the constant and say why in the commit.
const goldenTraceHash = 0x2cb4df2a5583539c

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
	// Flips in the first 4 bytes (the sequence number) are not detected by
	// this sink: they are 4/256 of all flips.
	if math.Abs(float64(st.Duplicated)-0.1*n) > 4*math.Sqrt(0.09*n) {
		t.Errorf("duplicated %d of %d", st.Duplicated, n)
	}
	// A corrupted datagram that is then duplicated arrives corrupted twice.
	if c := float64(st.Corrupted); math.Abs(c-0.1*n) > 4*math.Sqrt(0.09*n) ||
		uint64(corrupted) < st.Corrupted*9/10 || uint64(corrupted) > st.Corrupted+st.Duplicated {
		t.Errorf("corrupted %d (link) / %d (seen)", st.Corrupted, corrupted)
	}
}

// Jitter never reorders; the reorder impairment does, by about its rate.
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

func TestPlaneFaults(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, time.Microsecond))
	cfg.Planes = 2
	cfg.Faults = []Fault{
		{At: 1 * time.Millisecond, Kind: PlaneDown, Plane: 0},
		{At: 2 * time.Millisecond, Kind: Repair, Plane: 0},
		{At: 3 * time.Millisecond, Kind: PlaneBlackhole, Plane: 1},
		{At: 4 * time.Millisecond, Kind: Repair, Plane: 1},
	}
	f, sim := newTestFabric(t, cfg)
	s := attachSink(f, 1)
	for p := 0; p < 2; p++ {
		sim.At(0, &pacer{f: f, sim: sim, src: 0, dst: 1, plane: p, port: 50000, size: 1000, gap: time.Microsecond, count: 5000})
	}
	up := map[clock.Time]bool{}
	for _, at := range []time.Duration{500 * time.Microsecond, 1500 * time.Microsecond, 2500 * time.Microsecond, 3500 * time.Microsecond} {
		sim.RunUntil(clock.Time(at))
		up[clock.Time(at)] = f.PlaneUp(0) && f.PlaneUp(1)
	}
	sim.RunUntil(clock.Time(time.Second))
	if !up[clock.Time(500*time.Microsecond)] || up[clock.Time(1500*time.Microsecond)] || !up[clock.Time(2500*time.Microsecond)] || !up[clock.Time(3500*time.Microsecond)] {
		t.Errorf("plane state seen: %v (down shows, blackhole does not)", up)
	}
	perPlane := [2]int{}
	// What is already on the wire of the last link when a fault starts still
	// arrives, up to one serialization and delay later.
	inFault := func(at clock.Time, start time.Duration) bool {
		return at > clock.Time(start+3*time.Microsecond) && at < clock.Time(start+time.Millisecond)
	}
	for _, a := range s.got {
		p := int(a.src.Addr().As4()[1])
		perPlane[p]++
		if p == 0 && inFault(a.at, time.Millisecond) || p == 1 && inFault(a.at, 3*time.Millisecond) {
			t.Fatalf("datagram on plane %d arrived at %v, inside its fault", p, time.Duration(a.at))
		}
	}
	var down, black uint64
	for _, l := range f.Links() {
		down += l.Stats().Drops[DropDown]
		black += l.Stats().Drops[DropBlackhole]
	}
	if down < 900 || black < 900 || perPlane[0]+int(down) != 5000 || perPlane[1]+int(black) != 5000 {
		t.Errorf("plane 0: %d delivered, %d down; plane 1: %d delivered, %d blackholed", perPlane[0], down, perPlane[1], black)
	}
}

func TestLinkSlowdown(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, time.Microsecond))
	cfg.Faults = []Fault{{At: 0, Kind: LinkSlowdown, Plane: 0, Factor: 0.25, Link: &LinkMatch{Kind: Downlink, Host: 1, Leaf: -1, Spine: -1}}}
	f, sim := newTestFabric(t, cfg)
	s := attachSink(f, 1)
	sim.RunUntil(1)
	for i := 0; i < 1000; i++ {
		f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 0, 50000, 1184, uint32(i), link.ECT0)})
	}
	sim.RunUntil(clock.Time(time.Second))
	// 1250 wire bytes at 2.5 Gb/s: 4000 ns apart.
	if gap := s.got[999].at - s.got[998].at; gap != 4000 || f.Downlink(0, 1).Rate() != 2_500_000_000 {
		t.Fatalf("gap %v at rate %d", gap, f.Downlink(0, 1).Rate())
	}
}

func TestNoRoute(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, 0), simpleLink(10*gbps, 0))
	cfg.Planes = 2
	f, sim := newTestFabric(t, cfg)
	s := attachSink(f, 1)
	d := datagram(f, 0, 1, 0, 1, 100, 0, link.ECT0)
	cross := d
	cross.Dst = datagram(f, 0, 1, 1, 1, 0, 0, 0).Dst // plane 1 address
	spoof := datagram(f, 1, 1, 0, 1, 100, 0, link.ECT0)
	big := datagram(f, 0, 1, 0, 1, 0, 0, link.ECT0)
	big.Data = make([]byte, 9001)
	f.Host(0).Send([]link.Datagram{cross, spoof, big, d})
	sim.RunUntil(clock.Time(time.Second))
	if f.NoRoute() != 3 || len(s.got) != 1 {
		t.Fatalf("no route %d, delivered %d", f.NoRoute(), len(s.got))
	}
}

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

// Steady state moves datagrams without allocating: buffers, packets and
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

// With single-port hosts the source leaf's hash picks the plane as well as
// the spine: 256 source ports spread over 4 planes x 2 spines, each
// datagram crosses the plane Path names, and a plane that fails takes only
// the flows hashed onto it.
func TestSinglePortHostsHashOverPlanes(t *testing.T) {
	cfg := leafSpine(4, 16, 4, 8, 2)
	cfg.SinglePort = true
	cfg.Faults = []Fault{{At: time.Millisecond, Kind: PlaneDown, Plane: 1}}
	f, sim := newTestFabric(t, cfg)
	s := attachSink(f, 12)
	counts := map[[2]int]int{}
	onPlane1 := 0
	for port := 0; port < 256; port++ {
		d := datagram(f, 3, 12, 0, uint16(49152+port), 100, uint32(port), link.ECT0)
		p, sp := f.Path(d.Src, d.Dst)
		counts[[2]int{p, sp}]++
		if p == 1 {
			onPlane1++
		}
		before := f.FabricLink(p, 0, sp, true).Stats().Packets
		f.Host(3).Send([]link.Datagram{d})
		sim.RunUntil(sim.Now() + clock.Time(3*time.Microsecond))
		if f.FabricLink(p, 0, sp, true).Stats().Packets != before+1 {
			t.Fatalf("port %d: not carried by plane %d spine %d", port, p, sp)
		}
	}
	for k, c := range counts {
		if c < 16 || c > 48 { // Binomial(256, 1/8): 32 +- 3 sigma
			t.Errorf("plane %d spine %d got %d of 256 ports", k[0], k[1], c)
		}
	}
	if len(counts) != 8 {
		t.Errorf("ports used %d plane-spine pairs, want 8", len(counts))
	}
	sim.RunUntil(clock.Time(2 * time.Millisecond)) // plane 1 is down now
	got := len(s.got)
	for port := 0; port < 256; port++ {
		f.Host(3).Send([]link.Datagram{datagram(f, 3, 12, 0, uint16(49152+port), 100, uint32(port), link.ECT0)})
	}
	sim.RunUntil(sim.Now() + clock.Time(time.Millisecond))
	if lost := 256 - (len(s.got) - got); lost != onPlane1 {
		t.Errorf("plane 1 down lost %d datagrams; %d ports hash onto it", lost, onPlane1)
	}
	if f.Uplink(1, 3).Stats().Drops[DropDown] != 0 {
		t.Error("a plane fault touched a host's own link")
	}
	if _, err := New(Config{Hosts: 2, Planes: 2, SinglePort: true, Uplink: simpleLink(gbps, 0), Downlink: simpleLink(gbps, 0)}, clock.NewSim()); err == nil {
		t.Error("single-port hosts without a leaf-spine accepted")
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

// Hosts hear of a plane going down and coming back, not of a blackhole.
func TestOnPlaneChange(t *testing.T) {
	cfg := twoHosts(simpleLink(gbps, 0), simpleLink(gbps, 0))
	cfg.Planes = 2
	cfg.Faults = []Fault{{At: 10, Kind: PlaneDown, Plane: 1}, {At: 20, Kind: PlaneBlackhole, Plane: 0},
		{At: 30, Kind: Repair, Plane: 1}, {At: 40, Kind: Repair, Plane: 0}}
	f, sim := newTestFabric(t, cfg)
	var seen []string
	f.OnPlaneChange(func(h, p int, up bool) { seen = append(seen, fmt.Sprintf("host %d %d:%v@%d", h, p, up, sim.Now())) })
	sim.RunUntil(100)
	if got := strings.Join(seen, " "); got != "host 0 1:false@10 host 1 1:false@10 host 0 1:true@30 host 1 1:true@30" {
		t.Fatalf("plane changes seen: %s", got)
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
