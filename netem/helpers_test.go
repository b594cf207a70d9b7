package netem

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

const (
	gbps = int64(1e9)
	kib  = 1024
)

// simpleLink is a link config with a rate and a delay and nothing else.
func simpleLink(rate int64, delay time.Duration) LinkConfig {
	return LinkConfig{Rate: rate, Delay: delay}
}

// newTestFabric builds a fabric on a fresh Sim, failing the test on error.
func newTestFabric(t testing.TB, cfg Config) (*Fabric, *clock.Sim) {
	t.Helper()
	sim := clock.NewSim()
	f, err := New(cfg, sim)
	if err != nil {
		t.Fatal(err)
	}
	return f, sim
}

// arrival is one datagram a sink saw.
type arrival struct {
	at   clock.Time
	src  netip.AddrPort
	ecn  link.ECN
	size int
	seq  uint32 // the first 4 bytes of the payload
}

// sink records what arrives at a host.
type sink struct{ got []arrival }

func (s *sink) Receive(d *link.Datagram, at clock.Time) {
	var seq uint32
	if len(d.Data) >= 4 {
		seq = uint32(d.Data[0])<<24 | uint32(d.Data[1])<<16 | uint32(d.Data[2])<<8 | uint32(d.Data[3])
	}
	s.got = append(s.got, arrival{at, d.Src, d.ECN, len(d.Data), seq})
}

func attachSink(f *Fabric, host int) *sink {
	s := &sink{}
	f.Host(host).Attach(s)
	return s
}

// datagram makes a datagram of size bytes from host src's port srcPort on
// plane to host dst on the same plane, numbered seq in its first 4 bytes.
func datagram(f *Fabric, src, dst, plane int, srcPort uint16, size int, seq uint32, ecn link.ECN) link.Datagram {
	b := f.Host(src).Buffer()[:size]
	{
		for i := range b {
			b[i] = byte(i)
		}
	}
	if size >= 4 {
		b[0], b[1], b[2], b[3] = byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
	}
	return link.Datagram{
		Src:  netip.AddrPortFrom(Addr(plane, src), srcPort),
		Dst:  netip.AddrPortFrom(Addr(plane, dst), 4797),
		ECN:  ecn,
		Data: b,
	}
}

// pacer is a clock.Event that sends count datagrams from src to dst, one
// every gap.
type pacer struct {
	f                *Fabric
	sim              *clock.Sim
	src, dst, plane  int
	port             uint16
	size             int
	gap              time.Duration
	sent, count      int
	ecn              link.ECN
	portsPerDatagram bool // vary the source port per datagram
	noFill           bool // leave the payload as the buffer had it, for benchmarks
	batch            [1]link.Datagram
}

func (p *pacer) Fire() {
	port := p.port
	if p.portsPerDatagram {
		port += uint16(p.sent)
	}
	var d link.Datagram
	if p.noFill {
		d = link.Datagram{
			Src: netip.AddrPortFrom(Addr(p.plane, p.src), port), Dst: netip.AddrPortFrom(Addr(p.plane, p.dst), 4797),
			ECN: p.ecn, Data: p.f.Host(p.src).Buffer()[:p.size],
		}
	} else {
		d = datagram(p.f, p.src, p.dst, p.plane, port, p.size, uint32(p.sent), p.ecn)
	}
	p.batch[0] = d
	p.f.Host(p.src).Send(p.batch[:])
	p.sent++
	if p.sent < p.count {
		p.sim.After(p.gap, p)
	}
}

// After runs its function at the time given, in order with a fault
// scheduled for the same time before it, so the function sees the fault in
// effect.
func TestAfterRunsInOrderOnTheFabricClock(t *testing.T) {
	f, sim := newTestFabric(t, Config{Hosts: 2, Planes: 2, Uplink: simpleLink(1e9, time.Microsecond), Downlink: simpleLink(1e9, time.Microsecond)})
	at := 7 * time.Microsecond
	if err := f.ScheduleFault(at, Fault{Kind: PlaneDown, Plane: 1}); err != nil {
		t.Fatal(err)
	}
	var ranAt clock.Time = -1
	var up bool
	f.After(at, func() { ranAt, up = sim.Now(), f.PlaneUp(1) })
	sim.RunUntil(clock.Time(time.Millisecond))
	if ranAt != clock.Time(at) || up {
		t.Fatalf("ran at %v with plane 1 up %v; want at %v, plane down", ranAt, up, at)
	}
}

// receiverFunc is a link.Receiver of one function.
type receiverFunc func(d *link.Datagram, at clock.Time)

func (f receiverFunc) Receive(d *link.Datagram, at clock.Time) { f(d, at) }
