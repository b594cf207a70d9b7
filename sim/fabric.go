package sim

import (
	"fmt"
	"time"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/netem"
)

// The fabric of the scenarios of many flows: its hosts, planes and links,
// and the engines' settings on it.

// FabricOptions are the network and the engines of a many-flow scenario.
type FabricOptions struct {
	Hosts, Planes int
	// HostsPerLeaf and Spines make each plane a leaf-spine, and FatTreeK
	// a three-tier fat tree of switches with k ports (netem.Config). Zero
	// for all gives one switch per plane.
	HostsPerLeaf, Spines int
	FatTreeK             int
	// PlaneLinks give planes links of their own rate, delay or buffer.
	PlaneLinks []PlaneLink
	LinkRate   int64
	Links
	Loss          float64 // random loss on every downlink
	Paths         int     // per connection
	Baseline, PFC bool
	// Faults are played at their times, counted from the flows' start
	// once the connections are set up. A fault sooner than a packet's
	// serialization and Delay keeps the run on one clock, and so do
	// faults with flows that wait for others.
	Faults []netem.Fault
	Seed   uint64
	// StartJitter, when above 0, delays each flow's start by a time drawn
	// from the seed, uniform in [0, StartJitter): hosts of a real job
	// never start at one instant, and with it a seed sweep varies more
	// than the ECMP hash.
	StartJitter time.Duration
	// DelayTarget is the engines' Config.DelayTarget: 0 for the default,
	// below 0 for no delay signal.
	DelayTarget time.Duration
	// FirstWindow is the engines' Config.FirstWindow: how their first
	// windows are sized.
	FirstWindow engine.FirstWindowPolicy
	// Resend is the engines' Config.Resend: the path a lost packet is
	// resent on.
	Resend engine.ResendPolicy
	// Bounds asks for the bounds the paths' routes put on the
	// connections (RouteBounds), computed at the end of the run.
	Bounds bool
	// RealPayloads makes the engines copy and checksum every payload byte,
	// as on a real wire. By default payloads are placeholders.
	RealPayloads bool
	// Tracer, when set, hears of the engines' decisions
	// (engine.Config.Tracer). A run it hears goes on one clock, never
	// over processes. A scenario of several runs gives it to its first
	// run alone, so that what it hears is one run's.
	Tracer engine.Tracer
	// Workers is the cores a run over processes takes, one per core when
	// zero. A run goes over processes, a host each, when no flow waits
	// for one that ends at another host and the fabric has one switch
	// per plane, a delay, no PFC and no shared switch buffer. Its results
	// are the same for any Workers.
	Workers int
}

// PlaneLink gives every link of one plane a rate in bits/s, a delay, a
// queue buffer in bytes, or several; zero keeps the fabric's.
type PlaneLink struct {
	Plane  int
	Rate   int64
	Delay  time.Duration
	Buffer int
}

// CheckPlanes says what is wrong with the PlaneLinks, if anything: a plane
// beyond Planes, or a buffer that cannot hold one full packet.
func (o FabricOptions) CheckPlanes() error {
	for _, pl := range o.PlaneLinks {
		if pl.Plane >= o.Planes {
			return fmt.Errorf("plane %d: there are %d planes", pl.Plane, o.Planes)
		}
		if p := sizeFor(o.MTU); pl.Buffer > 0 && pl.Buffer < p.maxPacket() {
			return fmt.Errorf("plane %d buffer of %d bytes: want at least one full packet, %d bytes", pl.Plane, pl.Buffer, p.maxPacket())
		}
	}
	return nil
}

// MaxStartJitter bounds FabricOptions.StartJitter.
const MaxStartJitter = 10 * time.Millisecond

// planeRate is plane p's link rate.
func (o FabricOptions) planeRate(p int) int64 {
	rate := o.LinkRate
	for _, pl := range o.PlaneLinks {
		if pl.Plane == p && pl.Rate > 0 {
			rate = pl.Rate
		}
	}
	return rate
}

// DefaultFabric is 64 hosts on planes of 100 Gb/s, one switch each.
func DefaultFabric(planes int) FabricOptions {
	return FabricOptions{Hosts: 64, Planes: planes, LinkRate: 100e9, Links: DefaultLinks(), Paths: 8, Seed: 1}
}
