package netem

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/clock/parallel"
	"github.com/mroce/mroce/link"
)

// In a fabric over processes, a host each, a datagram crosses from its
// sender's process to its receiver's on the uplink. It arrives when it would
// on one clock, and the receiver's process runs the delivery.
func TestGroupedDeliveryTime(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, 2*time.Microsecond))
	g := parallel.NewGroup(2, time.Microsecond, 2)
	f, err := NewGrouped(cfg, g)
	if err != nil {
		t.Fatal(err)
	}
	var at clock.Time
	f.Host(1).Attach(receiverFunc(func(d *link.Datagram, now clock.Time) {
		at = g.LP(1).Now()
	}))
	f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 0, 50000, 1184, 7, link.ECT0)})
	g.RunWhile(clock.Time(time.Second), func() bool { return at == 0 })
	if want := clock.Time(1000 + 1000 + 1000 + 2000); at != want || f.Delivered() != 1 || f.InFlight() != 0 {
		t.Fatalf("arrived at %v (want %v); %d delivered, %d in flight", at, want, f.Delivered(), f.InFlight())
	}
}

// A fabric over processes refuses what it cannot share between them. That
// is a leaf-spine, PFC, a shared switch buffer, a trace, taps other than
// host taps, an uplink faster than the processes' lookahead, and a count of
// processes other than the hosts'.
func TestGroupedRefuses(t *testing.T) {
	good := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, time.Microsecond))
	for _, c := range []struct {
		name, want string
		edit       func(*Config)
		procs      int
	}{
		{"leaf-spine", "one switch per plane", func(c *Config) { *c = leafSpine(1, 2, 1, 1, 1) }, 2},
		{"trace", "no trace", func(c *Config) { c.Trace = true }, 2},
		{"PFC", "no PFC", func(c *Config) { c.Uplink.Queue.PFC = &PFC{XOff: 2, XOn: 1} }, 2},
		{"shared buffer", "shared buffer", func(c *Config) { c.SharedBuffer = &SharedBuffer{Bytes: 1 << 20, Alpha: 1} }, 2},
		{"fast uplink", "shorter than the processes' lookahead", func(c *Config) { c.Uplink.Delay = 999 }, 2},
		{"uplink jitter", "no jitter on uplinks", func(c *Config) { c.Uplink.Impair.Jitter = 500 }, 2},
		{"processes", "3 processes for 2 hosts", func(*Config) {}, 3},
	} {
		cfg := good
		c.edit(&cfg)
		_, err := NewGrouped(cfg, parallel.NewGroup(c.procs, time.Microsecond, 1))
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrNotGrouped) != (c.procs == cfg.Hosts) {
			t.Errorf("%s: error %v, want one mentioning %q (ErrNotGrouped: a configuration one clock can run)", c.name, err, c.want)
		}
	}
	bad := good
	bad.Faults = []Fault{{Kind: PlaneDown, Plane: 9}}
	if _, err := NewGrouped(bad, parallel.NewGroup(2, time.Microsecond, 1)); err == nil || errors.Is(err, ErrNotGrouped) {
		t.Errorf("a fault on plane 9 of 1: %v (a bad configuration, not one for one clock)", err)
	}
	f, err := NewGrouped(good, parallel.NewGroup(2, time.Microsecond, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("a tap added over processes")
		}
	}()
	f.AddTap(func(*TapEvent) {})
}

// Over processes, each process changes its own links at a fault's time, and
// its hosts hear on their own process of a plane going down and coming
// back. Host taps see their host's links. A datagram sent on the plane
// before the fault arrives. One on its uplink's wire when the fault comes is
// lost there, because the uplink decided so when it left, its far end being
// another process's. One sent while the plane is down is dropped at its
// sender's uplink, and one sent after the repair arrives. All of it happens
// as on one clock, and the same on any number of cores.
func TestGroupedFaults(t *testing.T) {
	run := func(workers int) string {
		cfg := Config{Seed: 1, Hosts: 3, Planes: 2, Uplink: simpleLink(10*gbps, time.Microsecond), Downlink: simpleLink(10*gbps, time.Microsecond)}
		cfg.Faults = []Fault{{At: 5 * time.Microsecond, Kind: PlaneDown, Plane: 1}}
		var f *Fabric
		var err error
		var lp func(h int) Scheduler
		if workers == 0 { // on one clock
			sim := clock.NewSim()
			f, err = New(cfg, sim)
			lp = func(int) Scheduler { return sim }
		} else {
			g := parallel.NewGroup(3, time.Microsecond, workers)
			f, err = NewGrouped(cfg, g)
			lp = func(h int) Scheduler { return g.LP(h) }
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := f.ScheduleFault(20*time.Microsecond, Fault{Kind: Repair, Plane: 1}); err != nil {
			t.Fatal(err)
		}
		logs := make([][]string, 3) // by host, and only its process writes it
		f.OnPlaneChange(func(h, plane int, up bool) {
			logs[h] = append(logs[h], fmt.Sprintf("plane %d up %v at %v", plane, up, lp(h).Now()))
		})
		f.AddHostTap(func(h int, e *TapEvent) {
			if e.Verdict == Delivered || e.Verdict == Dropped {
				logs[h] = append(logs[h], fmt.Sprintf("%v #%d on %v at %v", e.Verdict, e.Datagram.Data[3], e.Link.Kind(), e.At))
			}
		})
		for h := range 3 {
			f.Host(h).Attach(receiverFunc(func(*link.Datagram, clock.Time) {}))
		}
		for i, at := range []time.Duration{0, 4500 * time.Nanosecond, 10 * time.Microsecond, 30 * time.Microsecond} {
			lp(0).At(clock.Time(at), clock.Func(func() {
				f.Host(0).Send([]link.Datagram{datagram(f, 0, 2, 1, 50000, 1000, uint32(i), link.ECT0)})
			}))
		}
		if workers == 0 {
			lp(0).(*clock.Sim).RunUntil(clock.Time(time.Millisecond))
		} else {
			f.group.RunWhile(clock.Time(time.Millisecond), func() bool { return true })
		}
		var all []string
		for h, l := range logs {
			all = append(all, fmt.Sprintf("host %d: %s", h, strings.Join(l, "; ")))
		}
		return strings.Join(all, "\n")
	}
	want := "host 0: plane 1 up false at 5µs; dropped #1 on up at 6.353µs; dropped #2 on up at 10µs; plane 1 up true at 20µs\n" +
		"host 1: plane 1 up false at 5µs; plane 1 up true at 20µs\n" +
		"host 2: delivered #0 on down at 3.704µs; plane 1 up false at 5µs; plane 1 up true at 20µs; delivered #3 on down at 33.706µs"
	for _, workers := range []int{0, 1, 3} {
		if got := run(workers); got != want {
			t.Fatalf("%d workers (0: one clock):\n%s\nwant\n%s", workers, got, want)
		}
	}
}

// Over processes, a fault is taken only for after the datagrams already on
// the wire of an uplink it changes have arrived. Each decided when it left
// that it would arrive, its far end being another process's. A datagram on
// a slow uplink's wire arrives 1 us after its serialization ends, 10.3 us
// after it was sent. A datagram that its uplink already decided is lost on
// the wire holds back a repair the same way. It must not arrive to find the
// link up, on its sender's process.
func TestGroupedFaultAfterTheWire(t *testing.T) {
	cfg := twoHosts(simpleLink(gbps, time.Microsecond), simpleLink(gbps, time.Microsecond))
	g := parallel.NewGroup(2, time.Microsecond, 1)
	f, err := NewGrouped(cfg, g)
	if err != nil {
		t.Fatal(err)
	}
	f.Host(1).Attach(receiverFunc(func(*link.Datagram, clock.Time) {}))
	f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 0, 50000, 1100, 0, link.ECT0)})
	g.RunWhile(clock.Time(500*time.Nanosecond), func() bool { return true })
	up := &LinkMatch{Kind: Uplink, Host: 0, Leaf: -1, Spine: -1}
	first := f.FaultLeadTime(Fault{Kind: PlaneBlackhole, Link: up})
	if want := time.Duration(1166*8+1000) + 1; first != want {
		t.Fatalf("first time for a fault on the uplink: %v, want %v", first, want)
	}
	if err := f.ScheduleFault(first-1, Fault{Kind: PlaneBlackhole, Link: up}); err == nil || !strings.Contains(err.Error(), "arrive until") {
		t.Fatalf("a fault before the datagram on the wire arrives: %v", err)
	}
	if idle := f.FaultLeadTime(Fault{Kind: PlaneBlackhole, Plane: 0, Link: &LinkMatch{Kind: Uplink, Host: 1, Leaf: -1, Spine: -1}}); idle != time.Duration(g.Now()) {
		t.Fatalf("an idle uplink holds a fault back to %v (now %v)", idle, g.Now())
	}
	if err := f.ScheduleFault(first, Fault{Kind: PlaneBlackhole, Link: up}); err != nil {
		t.Fatal(err)
	}
	g.RunWhile(clock.Time(time.Millisecond), func() bool { return true })
	if f.Delivered() != 1 {
		t.Fatalf("%d delivered: the datagram on the wire arrives before the fault", f.Delivered())
	}
	// A datagram that left before a blackhole of its uplink and arrives
	// after it is lost on the wire, as its uplink decided when it left. A
	// repair before it arrives would find it on the sender's process with
	// the link up.
	cfg.Faults = []Fault{{At: 5 * time.Microsecond, Kind: PlaneBlackhole, Link: up}}
	g = parallel.NewGroup(2, time.Microsecond, 1)
	if f, err = NewGrouped(cfg, g); err != nil {
		t.Fatal(err)
	}
	f.Host(1).Attach(receiverFunc(func(*link.Datagram, clock.Time) {}))
	f.Host(0).Send([]link.Datagram{datagram(f, 0, 1, 0, 50000, 1100, 1, link.ECT0)})
	g.RunWhile(clock.Time(500*time.Nanosecond), func() bool { return true })
	repair := Fault{Kind: Repair, Link: up}
	if err := f.ScheduleFault(6*time.Microsecond, repair); err == nil {
		t.Fatal("a repair before the datagram lost on the wire arrives")
	}
	if err := f.ScheduleFault(f.FaultLeadTime(repair), repair); err != nil {
		t.Fatal(err)
	}
	g.RunWhile(clock.Time(time.Millisecond), func() bool { return true })
	if f.Delivered() != 0 || f.InFlight() != 0 {
		t.Fatalf("%d delivered, %d in flight: the datagram lost on the wire arrived", f.Delivered(), f.InFlight())
	}
}

// One host sending to another over processes allocates nothing per
// datagram in steady state. The datagrams the receiver's process frees go
// back to the sender's between windows. The sender would otherwise make new
// ones for ever. A run of windows starts its helpers, which costs a few
// allocations per run, as many for 64 datagrams as for 512.
func TestGroupedSteadyStateAllocatesNothing(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, time.Microsecond))
	g := parallel.NewGroup(2, time.Microsecond, 1) // one worker, since this tests the pools and not the cores
	f, err := NewGrouped(cfg, g)
	if err != nil {
		t.Fatal(err)
	}
	f.Host(1).Attach(receiverFunc(func(*link.Datagram, clock.Time) {}))
	proto := datagram(f, 0, 1, 0, 50000, 0, 0, 0)
	batch := make([]link.Datagram, 512)
	send := func(n int) func() {
		return func() {
			for i := range batch[:n] {
				batch[i] = proto
				batch[i].Data = f.Host(0).Buffer()[:1024]
			}
			f.Host(0).Send(batch[:n])
			g.RunWhile(g.Now()+clock.Time(600*time.Microsecond), func() bool { return true })
		}
	}
	for range 20 {
		send(512)()
	}
	few, many := testing.AllocsPerRun(20, send(64)), testing.AllocsPerRun(20, send(512))
	if many > few || few > 8 {
		t.Fatalf("%.1f allocations a run of 64 datagrams, %.1f of 512", few, many)
	}
}
