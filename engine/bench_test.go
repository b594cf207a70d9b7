package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// wire is an in-memory port without I/O. Datagrams queue until the test
// delivers them, and their buffers come back to a free list.
type wire struct {
	free [][]byte
	out  []link.Datagram
}

func (w *wire) Buffer() []byte {
	if n := len(w.free); n > 0 {
		b := w.free[n-1]
		w.free = w.free[:n-1]
		return b[:0]
	}
	return make([]byte, 0, 9000)
}

func (w *wire) Send(batch []link.Datagram) { w.out = append(w.out, batch...) }

// deliver hands every queued datagram of w to ep and recycles its buffer.
func (w *wire) deliver(ep *Endpoint, now clock.Time) int {
	n := len(w.out)
	for i := range w.out {
		ep.Receive(&w.out[i], now)
		w.free = append(w.free, w.out[i].Data)
		w.out[i] = link.Datagram{}
	}
	w.out = w.out[:0]
	return n
}

// wirePair is two endpoints joined by wires, with an established
// connection from a to b and a big WRITE to keep it busy.
type wirePair struct {
	sim      *clock.Sim
	wa, wb   *wire
	a, b     *Endpoint
	ca       *Conn
	src, dst *memreg.Region
	rec      *recorder
}

func newWirePair(t testing.TB) *wirePair {
	sim := clock.NewSim()
	w := &wirePair{sim: sim, wa: &wire{}, wb: &wire{}, rec: &recorder{}}
	addrA, addrB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	var err error
	w.a, err = NewEndpoint(Config{Planes: []netip.Addr{addrA}, Paths: 8, DSNWindow: 4096, Random: seeded(1)}, sim, w.wa)
	if err != nil {
		t.Fatal(err)
	}
	w.b, _ = NewEndpoint(Config{Planes: []netip.Addr{addrB}, Paths: 8, DSNWindow: 4096, Random: seeded(2)}, sim, w.wb)
	regA, regB := memreg.NewRegistry(seeded(3)), memreg.NewRegistry(seeded(4))
	pdA, pdB := regA.NewDomain(), regB.NewDomain()
	w.b.Listen(pdB, func(*Conn) (Events, bool) { return &recorder{}, true })
	w.ca, _ = w.a.Connect([]netip.Addr{addrB}, proto.DefaultPort, pdA, w.rec)
	for i := 0; i < 4; i++ {
		w.round()
	}
	if w.ca.State() != Established {
		t.Fatalf("not established: %v", w.ca.State())
	}
	w.src, _ = pdA.Register(make([]byte, 64<<20), memreg.LocalWrite)
	w.dst, _ = pdB.Register(make([]byte, 64<<20), memreg.LocalWrite|memreg.RemoteWrite)
	w.post()
	return w
}

func (w *wirePair) post() {
	w.ca.Post(SendWR{Op: OpWrite, Local: SGE{w.src, 0, 64 << 20}, RKey: w.dst.Key()})
}

// round moves one exchange. It delivers a's data to b and b's ACKs to a,
// and lets a little time pass.
func (w *wirePair) round() (data int) {
	now := w.sim.Now()
	data = w.wa.deliver(w.b, now)
	w.wb.deliver(w.a, now)
	w.sim.RunUntil(now + 500)
	if len(w.rec.done) > 0 {
		w.rec.done = w.rec.done[:0]
		w.post()
	}
	return data
}

// BenchmarkEngine4K measures the engine alone, with no emulator and no
// sockets, on 4 KiB WRITE packets over 8 paths. It reports nanoseconds per
// data packet on the send side, for segmenting, building, sealing and
// processing ACKs. It reports them on the receive side too, for decoding,
// validating, placing and acknowledging.
func BenchmarkEngine4K(b *testing.B) {
	w := newWirePair(b)
	var sendT, recvT time.Duration
	packets := 0
	for b.Loop() {
		now := w.sim.Now()
		t0 := time.Now()
		n := w.wa.deliver(w.b, now)
		t1 := time.Now()
		w.wb.deliver(w.a, now)
		w.sim.RunUntil(now + 500)
		t2 := time.Now()
		recvT += t1.Sub(t0)
		sendT += t2.Sub(t1)
		packets += n
		if len(w.rec.done) > 0 {
			w.rec.done = w.rec.done[:0]
			w.post()
		}
	}
	if packets == 0 {
		b.Fatal("no data moved")
	}
	b.ReportMetric(float64(sendT.Nanoseconds())/float64(packets), "send-ns/pkt")
	b.ReportMetric(float64(recvT.Nanoseconds())/float64(packets), "recv-ns/pkt")
	b.ReportMetric(float64(packets)/float64(b.N), "pkts/op")
	b.SetBytes(int64(4096 * packets / b.N))
}

// TestEngineSteadyStateAllocatesNothing checks that in steady state the
// engine allocates nothing per packet, on the send side or the receive
// side.
func TestEngineSteadyStateAllocatesNothing(t *testing.T) {
	skipUnderRace(t)
	w := newWirePair(t)
	// Warm up until the windows reach their cap and the buffer pools hold
	// the most ever in flight.
	for i := 0; i < 500; i++ {
		w.round()
	}
	moved := 0
	allocs := testing.AllocsPerRun(200, func() { moved += w.round() })
	if moved == 0 {
		t.Fatal("no data moved")
	}
	if allocs != 0 {
		t.Fatalf("%.2f allocations per round of %d packets", allocs, moved/201)
	}
}

// TestTransferOverNetemAllocatesNothing checks that a whole transfer,
// engine and emulator together, allocates nothing per data packet in steady
// state. It looks at stretches of a 256 MiB WRITE on 8 paths over 4 planes
// with 1% loss, so that recovery is in the loop too. It runs with real
// payloads, with placeholders, which use header buffers and padding, and
// in the authenticated mode, where every packet is sealed and opened.
func TestTransferOverNetemAllocatesNothing(t *testing.T) {
	skipUnderRace(t)
	for _, c := range []struct {
		placeholders, authed bool
	}{{false, false}, {true, false}, {false, true}} {
		placeholders := c.placeholders
		fc := fourPlanes()
		fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.01}
		fc.MaxDatagram = 4160
		cfg := Config{Paths: 8, PlaceholderPayloads: placeholders}
		n := newNet(t, fc, cfg)
		if c.authed {
			ic, ac := credentialPair(t, auth.MethodPSK, 0)
			n.withAuth(t, cfg, ic, ac)
		}
		pr := n.connect(0, 1)
		const size = 256 << 20
		src := pr.ha.region(t, size, 1, memreg.LocalWrite)
		dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
		pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
		// Warm up. The buffer and event pools grow to the most ever in
		// flight, and the rings and queues to their working size.
		n.run(2*time.Millisecond, func() bool { return false })
		before := pr.a.SenderStats().Packets
		allocs := testing.AllocsPerRun(50, func() { n.run(20*time.Microsecond, func() bool { return false }) })
		moved := pr.a.SenderStats().Packets - before
		if moved < 10000 || len(pr.ra.done) != 0 {
			t.Fatalf("%+v: moved %d packets (done %d): not a steady stretch", c, moved, len(pr.ra.done))
		}
		if c.authed && pr.a.session == nil {
			t.Fatal("the authenticated case has no keys")
		}
		if allocs != 0 {
			t.Fatalf("%+v: %.2f allocations per 20 µs stretch (%d packets in all)", c, allocs, moved)
		}
	}
}
