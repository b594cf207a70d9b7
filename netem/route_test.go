package netem

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// A 5-tuple always takes the same spine, the one Spine and Route report. 256 source
// ports spread over 8 spines within a 3-sigma binomial bound of 32 ± 16.
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
			if r := f.Route(d.Src, d.Dst); len(r) != 4 || r[0] != f.Uplink(0, 0) || r[1] != f.FabricLink(0, 0, s, true) ||
				r[2] != f.FabricLink(0, 1, s, false) || r[3] != f.Downlink(0, 12) {
				t.Fatalf("seed %d port %d: Route %v, want the uplink, spine %d's links and the downlink", seed, port, r, s)
			}
		}
		for s, c := range counts {
			if c < 16 || c > 48 {
				t.Errorf("seed %d: spine %d got %d of 256 ports, outside 32 +- 16", seed, s, c)
			}
		}
	}
}

// Spines are picked per seed, so two seeds send some 5-tuple different ways.
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

// With single-port hosts the source leaf's hash picks the plane as well as
// the spine. 256 source ports spread over 4 planes × 2 spines, each
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
		if r := f.Route(d.Src, d.Dst); len(r) != 4 || r[1] != f.FabricLink(p, 0, sp, true) || r[2] != f.FabricLink(p, 1, sp, false) {
			t.Fatalf("port %d: Route %v, not plane %d spine %d's links", port, r, p, sp)
		}
	}
	for k, c := range counts {
		if c < 16 || c > 48 { // Binomial(256, 1/8) is 32 ± 3 sigma
			t.Errorf("plane %d spine %d got %d of 256 ports", k[0], k[1], c)
		}
	}
	if len(counts) != 8 {
		t.Errorf("ports used %d plane-spine pairs, want 8", len(counts))
	}
	sim.RunUntil(clock.Time(2 * time.Millisecond)) // plane 1 is down by now
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

// fatTree is a k-ary fat tree of hosts on one plane, every link 10 Gb/s
// with 1 µs of delay.
func fatTree(k, hosts int) Config {
	l := simpleLink(10*gbps, time.Microsecond)
	return Config{Seed: 3, Hosts: hosts, Planes: 1, FatTreeK: k, Uplink: l, Downlink: l, FabricUp: l, FabricDown: l}
}

// On one switch a plane a datagram crosses its host's uplink and the
// destination's downlink, and nothing routes between planes.
func TestRouteOnOneSwitchAPlane(t *testing.T) {
	l := simpleLink(10*gbps, time.Microsecond)
	f, _ := newTestFabric(t, Config{Hosts: 4, Planes: 2, Uplink: l, Downlink: l})
	src, dst := netip.AddrPortFrom(Addr(1, 0), 49152), netip.AddrPortFrom(Addr(1, 3), 4791)
	if r := f.Route(src, dst); len(r) != 2 || r[0] != f.Uplink(1, 0) || r[1] != f.Downlink(1, 3) {
		t.Errorf("Route %v, want plane 1's uplink of host 0 and downlink of host 3", r)
	}
	if r := f.Route(src, netip.AddrPortFrom(Addr(0, 3), 4791)); r != nil {
		t.Errorf("a route from plane 1 to plane 0: %v", r)
	}
}

// In a fat tree of k = 4 (16 hosts, 4 pods of 2 edge and 2 aggregation
// switches, 4 cores) a datagram turns at its edge switch between hosts of
// one, at an aggregation switch within a pod, and at a core between pods,
// crossing 2, 4 and 6 links in as many serializations and delays. Between
// pods, 256 source ports spread over both aggregation switches of the
// source pod and over all four cores, and a 5-tuple always takes the way
// Path and Route name.
func TestFatTreeRoutes(t *testing.T) {
	f, sim := newTestFabric(t, fatTree(4, 16))
	s := attachSink(f, 15)
	const hop = 947 + 1000 // ns: 1,184 bytes at 10 Gb/s, rounded down, and the delay
	for _, c := range []struct{ src, hops int }{{14, 2}, {12, 4}, {0, 6}} {
		s.got = nil
		start := sim.Now()
		f.Host(c.src).Send([]link.Datagram{datagram(f, c.src, 15, 0, 50000, 1184-DefaultOverhead, 1, link.ECT0)})
		sim.RunUntil(start + clock.Time(time.Millisecond))
		want := time.Duration(c.hops * hop)
		if len(s.got) != 1 || s.got[0].at.Sub(start) != want {
			t.Fatalf("from host %d: %d arrivals, want one after %v", c.src, len(s.got), want)
		}
	}
	used := map[string]int{}
	for port := 0; port < 256; port++ {
		d := datagram(f, 0, 15, 0, uint16(49152+port), 100, 0, link.ECT0)
		_, agg := f.Path(d.Src, d.Dst)
		before := map[*Link]uint64{}
		for _, l := range f.Links() {
			before[l] = l.Stats().Packets
		}
		route := f.Route(d.Src, d.Dst)
		f.Host(0).Send([]link.Datagram{d})
		sim.RunUntil(sim.Now() + clock.Time(time.Millisecond))
		crossed := 0
		for _, l := range f.Links() {
			if l.Stats().Packets == before[l] {
				continue
			}
			crossed++
			if !slices.Contains(route, l) {
				t.Fatalf("port %d: the datagram crossed %v %d>%d, which Route leaves out", port, l.Kind(), l.From(), l.To())
			}
			used[fmt.Sprintf("%v %d>%d", l.Kind(), l.From(), l.To())]++
			if l.Kind() == FabricUp && l.To() != agg {
				t.Fatalf("port %d: Path names aggregation switch %d, the datagram took %d", port, agg, l.To())
			}
		}
		if crossed != len(route) {
			t.Fatalf("port %d: the datagram crossed %d links, Route names %d", port, crossed, len(route))
		}
	}
	for _, want := range []string{"leaf-spine 0>0", "leaf-spine 0>1", "agg-core 0>0", "agg-core 0>1", "agg-core 1>2", "agg-core 1>3",
		"core-agg 0>6", "core-agg 1>6", "core-agg 2>7", "core-agg 3>7", "spine-leaf 6>7", "spine-leaf 7>7"} {
		if used[want] < 32 {
			t.Errorf("link %s carried %d of 256 tuples", want, used[want])
		}
	}
	if len(used) != 14 { // those 12, the uplink and the downlink
		t.Errorf("links used: %v", used)
	}
}

// A fat tree's k is even and at most 64, it holds at most k^3/4 hosts, and
// it is no leaf-spine too.
func TestFatTreeConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{fatTree(5, 10), "want an even 2 .. 64"},
		{fatTree(66, 10), "want an even 2 .. 64"},
		{fatTree(4, 17), "holds at most 16"},
		{func() Config { c := fatTree(4, 16); c.HostsPerLeaf, c.Spines = 4, 2; return c }(), "takes the place of a leaf-spine"},
	} {
		if _, err := New(c.cfg, clock.NewSim()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg.FatTreeK, err, c.want)
		}
	}
	if _, err := New(fatTree(8, 128), clock.NewSim()); err != nil {
		t.Fatal(err)
	}
}
