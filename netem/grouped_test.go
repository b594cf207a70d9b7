package netem

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// A fabric over processes, a host each: a datagram crosses from its
// sender's process to its receiver's on the uplink and arrives when it
// would on one clock; the receiver's process runs the delivery.
func TestGroupedDeliveryTime(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, 2*time.Microsecond))
	g := clock.NewGroup(2, time.Microsecond, 2)
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

// What a fabric over processes cannot share between them is refused: a
// leaf-spine, faults, PFC, a trace, taps, an uplink faster than the
// processes' lookahead, a count of processes that is not the hosts'.
func TestGroupedRefuses(t *testing.T) {
	good := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, time.Microsecond))
	for _, c := range []struct {
		name, want string
		edit       func(*Config)
		procs      int
	}{
		{"leaf-spine", "one switch per plane", func(c *Config) { *c = leafSpine(1, 2, 1, 1, 1) }, 2},
		{"fault", "no faults", func(c *Config) { c.Faults = []Fault{{Kind: PlaneDown}} }, 2},
		{"trace", "no trace", func(c *Config) { c.Trace = true }, 2},
		{"PFC", "no PFC", func(c *Config) { c.Uplink.Queue.PFC = &PFC{XOff: 2, XOn: 1} }, 2},
		{"fast uplink", "shorter than the processes' lookahead", func(c *Config) { c.Uplink.Delay = 999 }, 2},
		{"uplink jitter", "no jitter on uplinks", func(c *Config) { c.Uplink.Impair.Jitter = 500 }, 2},
		{"processes", "3 processes for 2 hosts", func(*Config) {}, 3},
	} {
		cfg := good
		c.edit(&cfg)
		_, err := NewGrouped(cfg, clock.NewGroup(c.procs, time.Microsecond, 1))
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrNotGrouped) != (c.procs == cfg.Hosts) {
			t.Errorf("%s: error %v, want one mentioning %q (ErrNotGrouped: a configuration one clock can run)", c.name, err, c.want)
		}
	}
	f, err := NewGrouped(good, clock.NewGroup(2, time.Microsecond, 1))
	if err != nil {
		t.Fatal(err)
	}
	if f.ScheduleFault(0, Fault{Kind: PlaneDown}) == nil {
		t.Error("a fault scheduled over processes")
	}
	defer func() {
		if recover() == nil {
			t.Error("a tap added over processes")
		}
	}()
	f.AddTap(func(*TapEvent) {})
}

// One host sending to another over processes, in steady state, allocates
// nothing a datagram: the datagrams the receiver's process frees go back,
// between windows, to the sender's, which would otherwise make new ones
// for ever. (A run of windows starts its helpers: a few allocations a run,
// as many for 64 datagrams as for 512.)
func TestGroupedSteadyStateAllocatesNothing(t *testing.T) {
	cfg := twoHosts(simpleLink(10*gbps, time.Microsecond), simpleLink(10*gbps, time.Microsecond))
	g := clock.NewGroup(2, time.Microsecond, 1) // the pools, not the cores
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
