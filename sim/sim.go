// Package sim runs mroce's scenarios. Each one runs the real engine on
// the emulated fabric of package netem in virtual time and returns what it
// measured as a typed result. Every run is deterministic for its seed.
// Package report turns the results into tables and plots.
//
// The measurements follow the definitions of docs/results.md. The base
// RTT is the unloaded round trip. The ideal completion time is the wire
// bytes over the bottleneck rate plus a base RTT. Rates are measured over
// windows of max(1 base RTT, 10 x N x MTU / capacity).
//
// Three runners underlie the scenarios. Transfer moves one connection's
// bytes, Incast runs N senders into one receiver, and RunFlows runs many
// flows over a fabric of planes. Each scenario has a file of its own with
// its options, its defaults and its result.
package sim

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/clock/parallel"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// host is one emulated host with its engine endpoint.
type host struct {
	ep  *engine.Endpoint
	reg *memreg.Registry
	pd  *memreg.Domain
	clk *clock.Sim // its engine's clock, the world's or its process's
	// memory is the world's one allocation that every host's regions are
	// views of, when payloads are placeholders. No byte of it is read or
	// written. Without it, a run of large messages on many hosts would
	// hold hosts x 2 x the message in heap it never touches. It is nil
	// with real payloads.
	memory *[]byte
}

// region registers size bytes on the host. They are its own, or with
// placeholder payloads a view of the world's memory.
func (h *host) region(size int, access memreg.Access) *memreg.Region {
	var b []byte
	switch {
	case h.memory == nil:
		b = make([]byte, size)
	case len(*h.memory) < size:
		*h.memory = make([]byte, size)
		fallthrough
	default:
		b = (*h.memory)[:size:size]
	}
	g, err := h.pd.Register(b, access)
	if err != nil {
		panic(err) // sizes and access are ours
	}
	return g
}

// world is a fabric and its hosts, on one clock or over the processes of
// a group.
type world struct {
	sim   *clock.Sim      // nil over processes
	group *parallel.Group // nil on one clock
	fab   *netem.Fabric
	hosts []*host
}

// newWorld builds the fabric and an endpoint per host on one clock, with
// the simulated network of package endpoint/software. cfgFor gives each
// host's engine configuration. The engines carry placeholder payloads
// unless realPayloads is set or a link corrupts bits, which only a CRC
// would notice. Placeholders make the same decisions without copying or
// checksumming the bytes.
func newWorld(fc netem.Config, seed uint64, realPayloads bool, cfgFor func(h int) engine.Config) (*world, error) {
	return buildWorld(fc, seed, realPayloads, cfgFor, nil)
}

// newGroupedWorld is newWorld over a group of processes, one a host. They
// run in windows of the links' delay on workers cores, or one per core
// when workers is 0. Its runs are the same for any workers.
func newGroupedWorld(fc netem.Config, seed uint64, realPayloads bool, cfgFor func(h int) engine.Config, workers int) (*world, error) {
	if fc.Uplink.Delay <= 0 {
		return nil, fmt.Errorf("%w: no link delay to run windows of", netem.ErrNotGrouped)
	}
	return buildWorld(fc, seed, realPayloads, cfgFor, parallel.NewGroup(fc.Hosts, fc.Uplink.Delay, workers))
}

// buildWorld builds a world on one clock, or over g when g is not nil.
func buildWorld(fc netem.Config, seed uint64, realPayloads bool, cfgFor func(h int) engine.Config, g *parallel.Group) (*world, error) {
	placeholders := !realPayloads && !corrupts(fc)
	withPlaceholders := func(h int) engine.Config {
		c := cfgFor(h)
		c.PlaceholderPayloads = placeholders
		return c
	}
	var n *software.SimNetwork
	var err error
	if g != nil {
		n, err = software.NewSimNetworkGrouped(fc, seed, withPlaceholders, g)
	} else {
		n, err = software.NewSimNetworkFor(fc, seed, withPlaceholders)
	}
	if err != nil {
		return nil, err
	}
	w := &world{sim: n.Sim, group: g, fab: n.Fabric}
	var memory *[]byte
	if placeholders {
		memory = new([]byte)
	}
	for h := 0; h < fc.Hosts; h++ {
		b := n.Backend(h)
		clk := w.sim
		if g != nil {
			clk = g.LP(h)
		}
		w.hosts = append(w.hosts, &host{ep: b.Endpoint(), reg: b.Registry(), pd: b.Registry().NewDomain(), memory: memory, clk: clk})
	}
	return w, nil
}

// corrupts reports whether any of fc's links flips bits.
func corrupts(fc netem.Config) bool {
	links := []netem.LinkConfig{fc.Uplink, fc.Downlink, fc.FabricUp, fc.FabricDown}
	for _, o := range fc.Overrides {
		links = append(links, o.Link)
	}
	for _, l := range links {
		if l.Impair.Corrupt > 0 {
			return true
		}
	}
	return false
}

// events records a connection's completions and state. at is when the
// last completion came.
type events struct {
	done   int
	failed error
	at     clock.Time
	sim    *clock.Sim
}

func (e *events) Completion(_ *engine.Conn, wc engine.Completion) {
	if wc.Status != engine.StatusOK && e.failed == nil {
		e.failed = fmt.Errorf("%v: %v", wc.Status, wc.Err)
	}
	e.done++
	e.at = e.sim.Now()
}

func (e *events) State(_ *engine.Conn, s engine.ConnState, err error) {
	if s == engine.Closed && err != nil && e.failed == nil {
		e.failed = err
	}
}

// connect opens a connection from host a to host b, which must listen,
// and runs until it is established.
func (w *world) connect(a, b int, ev engine.Events) (*engine.Conn, error) {
	c, err := w.dial(a, b, ev)
	if err != nil {
		return nil, err
	}
	// The engine's ConnectTimeout ends a handshake that cannot complete.
	w.run(time.Hour, func() bool { return c.State() != engine.Connecting })
	if c.State() != engine.Established {
		return nil, fmt.Errorf("connection %d->%d: %v", a, b, c.Err())
	}
	return c, nil
}

// now is the world's time. Over processes it is read between windows.
func (w *world) now() clock.Time {
	if w.group != nil {
		return w.group.Now()
	}
	return w.sim.Now()
}

// fired counts the events and timers fired so far, on every process.
func (w *world) fired() uint64 { return w.total((*clock.Sim).Fired) }

// total sums count over the world's clock or its processes.
func (w *world) total(count func(*clock.Sim) uint64) uint64 {
	if w.group == nil {
		return count(w.sim)
	}
	var n uint64
	for i := range w.group.Len() {
		n += count(w.group.LP(i))
	}
	return n
}

// dial opens a connection from host a to host b, which must listen.
func (w *world) dial(a, b int, ev engine.Events) (*engine.Conn, error) {
	var remote []netip.Addr
	for p := 0; p < w.fab.Config().Planes; p++ {
		remote = append(remote, netem.Addr(p, b))
	}
	return w.hosts[a].ep.Connect(remote, proto.DefaultPort, w.hosts[a].pd, ev)
}

// run runs the world until cond holds or d of virtual time passes. Over
// processes, cond is looked at between windows. It must read only what
// the processes do not write while they run, or what is theirs alone.
func (w *world) run(d time.Duration, cond func() bool) bool {
	if g := w.group; g != nil {
		g.RunWhile(g.Now().Add(d), func() bool { return !cond() })
		return cond()
	}
	end := w.sim.Now().Add(d)
	for !cond() {
		if !w.sim.StepUntil(end) {
			return cond()
		}
	}
	return true
}

// listen makes host h accept every connection with fresh events.
func (w *world) listen(h int) {
	w.hosts[h].ep.Listen(w.hosts[h].pd, func(*engine.Conn) (engine.Events, bool) {
		return &events{sim: w.hosts[h].clk}, true
	})
}
