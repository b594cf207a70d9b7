package engine

import (
	"crypto/sha256"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// seededReader is a deterministic byte source for ids, sequence numbers and
// keys.
type seededReader struct{ r *rand.ChaCha8 }

func (s seededReader) Read(p []byte) (int, error) { return s.r.Read(p) }

func seeded(seed uint64) seededReader {
	var k [32]byte
	k[0], k[1] = byte(seed), byte(seed>>8)
	return seededReader{rand.NewChaCha8(k)}
}

// skipUnderRace skips a long scenario under the race detector. The engine
// runs on one goroutine, so the detector finds nothing in it that it does
// not find in the short tests, and it makes a scenario ten times as slow.
// make test runs the package again without it (the Makefile's large
// target).
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("a long scenario of the one-goroutine engine: run without -race")
	}
}

// host is one emulated host running an endpoint.
type host struct {
	ep  *Endpoint
	reg *memreg.Registry
	pd  *memreg.Domain
}

// testNet is a fabric of hosts in virtual time, each with an endpoint.
type testNet struct {
	t     testing.TB
	sim   *clock.Sim
	fab   *netem.Fabric
	hosts []*host
}

// writeFrame is what a WRITE packet of payload bytes takes on a netem
// link: its headers, trailer and netem's per-datagram overhead included.
func writeFrame(payload int) int {
	header, err := proto.HeaderLen(proto.TypeWrite, 0)
	if err != nil {
		panic(err)
	}
	return payload + header + proto.TrailerLen + netem.DefaultOverhead
}

// link100 is a 100 Gb/s link with 1 µs of delay.
func link100() netem.LinkConfig {
	return netem.LinkConfig{Rate: 100e9, Delay: time.Microsecond}
}

func twoHostFabric(planes int) netem.Config {
	return netem.Config{Seed: 1, Hosts: 2, Planes: planes, Uplink: link100(), Downlink: link100()}
}

func newNet(t testing.TB, fc netem.Config, ec Config) *testNet {
	t.Helper()
	return newNetWrapped(t, fc, ec, nil)
}

// newNetWrapped is newNet with each host's port given to wrap, when set,
// and the port it returns used by the host's endpoint.
func newNetWrapped(t testing.TB, fc netem.Config, ec Config, wrap func(h int, p link.Port) link.Port) *testNet {
	t.Helper()
	sim := clock.NewSim()
	fab, err := netem.New(fc, sim)
	if err != nil {
		t.Fatal(err)
	}
	n := &testNet{t: t, sim: sim, fab: fab}
	for h := 0; h < fc.Hosts; h++ {
		cfg := ec
		cfg.Planes = nil
		for p := 0; p < fc.Planes; p++ {
			cfg.Planes = append(cfg.Planes, netem.Addr(p, h))
		}
		cfg.Random = seeded(uint64(1000 + h))
		var port link.Port = fab.Host(h)
		if wrap != nil {
			port = wrap(h, port)
		}
		ep, err := NewEndpoint(cfg, sim, port)
		if err != nil {
			t.Fatal(err)
		}
		fab.Host(h).Attach(ep)
		reg := memreg.NewRegistry(seeded(uint64(2000 + h)))
		n.hosts = append(n.hosts, &host{ep: ep, reg: reg, pd: reg.NewDomain()})
	}
	fab.OnPlaneChange(func(h, plane int, up bool) { n.hosts[h].ep.SetPlaneUp(plane, up) })
	return n
}

// recorder collects a connection's events.
type recorder struct {
	done     []Completion
	states   []ConnState
	err      error
	onPlaced func(bytes uint32) // a WRITE received was placed whole (see WriteObserver)
}

func (r *recorder) Completion(_ *Conn, wc Completion) { r.done = append(r.done, wc) }

func (r *recorder) WritePlaced(_ *Conn, _ uint16, bytes uint32) {
	if r.onPlaced != nil {
		r.onPlaced(bytes)
	}
}
func (r *recorder) State(_ *Conn, s ConnState, err error) {
	r.states = append(r.states, s)
	if err != nil {
		r.err = err
	}
}

// pair is an established connection between host a, the initiator, and host
// b.
type pair struct {
	a, b     *Conn
	ra, rb   *recorder
	ha, hb   *host
	accepted *Conn
}

// connect opens a connection from host a to host b and runs the fabric
// until it is established on both sides.
func (n *testNet) connect(a, b int) *pair {
	n.t.Helper()
	pr := &pair{ra: &recorder{}, rb: &recorder{}, ha: n.hosts[a], hb: n.hosts[b]}
	n.hosts[b].ep.Listen(n.hosts[b].pd, func(c *Conn) (Events, bool) {
		pr.accepted = c
		return pr.rb, true
	})
	var remote []netip.Addr
	for p := 0; p < n.fab.Config().Planes; p++ {
		remote = append(remote, netem.Addr(p, b))
	}
	c, err := n.hosts[a].ep.Connect(remote, proto.DefaultPort, n.hosts[a].pd, pr.ra)
	if err != nil {
		n.t.Fatal(err)
	}
	pr.a = c
	n.sim.RunWhile(func() bool {
		return c.State() != Established || pr.accepted == nil || pr.accepted.State() != Established
	})
	if c.State() != Established || pr.accepted == nil || pr.accepted.State() != Established {
		n.t.Fatalf("not established: initiator %v (%v)", c.State(), c.Err())
	}
	pr.b = pr.accepted
	return pr
}

// runUntilSent runs until every message posted on each pair's sender has
// completed, for at most d, and reports whether they all did.
func (n *testNet) runUntilSent(pairs []*pair, d time.Duration) bool {
	return n.run(d, func() bool {
		for _, pr := range pairs {
			if pr.a.snd.busy() {
				return false
			}
		}
		return true
	})
}

// run runs the fabric until cond holds or d of virtual time passes.
func (n *testNet) run(d time.Duration, cond func() bool) bool {
	end := n.sim.Now().Add(d)
	for !cond() {
		if n.sim.Next() > end || !n.sim.Step() {
			return cond()
		}
	}
	return true
}

// region registers size bytes on host h, filled from seed, or with zeros
// when seed is 0.
func (h *host) region(t testing.TB, size int, seed uint64, access memreg.Access) *memreg.Region {
	t.Helper()
	buf := make([]byte, size)
	if seed != 0 {
		rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7}).Read(buf)
	}
	g, err := h.pd.Register(buf, access)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func digest(b []byte) [32]byte { return sha256.Sum256(b) }

// writeWhole WRITEs size bytes, filled from seed 5, from the pair's
// initiator into a fresh region of the acceptor, and runs until the WRITE
// completes; it fails the test unless it completes ok within a second.
func (n *testNet) writeWhole(t testing.TB, pr *pair, size int) (src, dst *memreg.Region) {
	t.Helper()
	src = pr.ha.region(t, size, 5, memreg.LocalWrite)
	dst = pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, uint32(size)}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
		t.Fatalf("the WRITE did not complete: %+v", pr.ra.done)
	}
	return src, dst
}

// checkInflight fails the test when a sender's count of packets in flight
// is not its paths' summed.
func checkInflight(t *testing.T, at clock.Time, senders ...*sender) {
	t.Helper()
	for i, s := range senders {
		sum := 0
		for _, p := range s.paths {
			sum += p.inflight
		}
		if s.inflight() != sum {
			t.Fatalf("at %v: sender %d counts %d packets in flight, its paths %d", at, i, s.inflight(), sum)
		}
	}
}
