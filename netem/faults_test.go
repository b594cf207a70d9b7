package netem

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// A plane that goes down or is blackholed drops what crosses it until its
// repair. Hosts see a plane go down but not a blackhole, and what is
// already on the last wire when a fault starts still arrives.
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
	// What is already on the wire of the last link when a fault starts
	// still arrives, up to one serialization and delay later.
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

// A slowdown lowers a link's rate by its factor.
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
	// 1250 wire bytes at 2.5 Gb/s take 4000 ns.
	if gap := s.got[999].at - s.got[998].at; gap != 4000 || f.Downlink(0, 1).Rate() != 2_500_000_000 {
		t.Fatalf("gap %v at rate %d", gap, f.Downlink(0, 1).Rate())
	}
}

// A link whose MTU falls drops the datagrams over it, silently, until the
// repair; one given a loss model loses what that model says, until the
// repair brings back its own.
func TestLinkMTUAndLoss(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, time.Microsecond))
	into := &LinkMatch{Kind: Downlink, Host: 1, Leaf: -1, Spine: -1}
	cfg.Faults = []Fault{
		{At: time.Millisecond, Kind: LinkMTU, Plane: 0, MTU: 1000, Link: into},
		{At: 2 * time.Millisecond, Kind: Repair, Plane: 0, Link: into},
		{At: 3 * time.Millisecond, Kind: LinkLoss, Plane: 0, Loss: &RandomLoss{P: 1}, Link: into},
		{At: 4 * time.Millisecond, Kind: Repair, Plane: 0, Link: into},
	}
	f, sim := newTestFabric(t, cfg)
	s := attachSink(f, 1)
	got := func() int { return len(s.got) }
	phase := [5]int{}
	for i, at := range []time.Duration{500 * time.Microsecond, 1500 * time.Microsecond, 2500 * time.Microsecond, 3500 * time.Microsecond, 4500 * time.Microsecond} {
		sim.RunUntil(clock.Time(at))
		before := got()
		for k := 0; k < 10; k++ {
			f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 0, 50000, 1184, uint32(k), link.ECT0)}) // over 1,000 bytes
			f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 0, 50000, 500, uint32(k), link.ECT0)})
		}
		sim.RunUntil(clock.Time(at + 100*time.Microsecond))
		phase[i] = got() - before
	}
	if phase != [5]int{20, 10, 20, 0, 20} {
		t.Fatalf("datagrams delivered by phase %v: want 20, 10 (the small ones), 20, 0, 20", phase)
	}
	if d := f.Downlink(0, 1).Stats().Drops[DropTooBig]; d != 10 {
		t.Fatalf("%d dropped as too big, want 10", d)
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
