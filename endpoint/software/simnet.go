package software

import (
	"math/rand/v2"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/clock/parallel"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/netem"
)

// SimNetwork is hosts on an emulated fabric in virtual time, each with a
// software device. Tests, simulations and the demo run on it. It is
// deterministic for a seed.
type SimNetwork struct {
	Sim    *clock.Sim
	Fabric *netem.Fabric
	hosts  []*Software
}

// NewSimNetwork builds the fabric and one engine endpoint per host. ec's
// Planes and Random are filled in per host.
func NewSimNetwork(fc netem.Config, ec engine.Config, seed uint64) (*SimNetwork, error) {
	return NewSimNetworkFor(fc, seed, func(int) engine.Config { return ec })
}

// NewSimNetworkFor is NewSimNetwork with each host's own engine
// configuration, such as a receiver with an inbound capacity or senders
// in baseline mode.
func NewSimNetworkFor(fc netem.Config, seed uint64, cfgFor func(host int) engine.Config) (*SimNetwork, error) {
	sim := clock.NewSim()
	fab, err := netem.New(fc, sim)
	if err != nil {
		return nil, err
	}
	n := &SimNetwork{Sim: sim, Fabric: fab}
	if err := n.addHosts(fc, seed, cfgFor, func(int) *clock.Sim { return sim }); err != nil {
		return nil, err
	}
	return n, nil
}

// NewSimNetworkGrouped is NewSimNetworkFor over the processes of g, a
// host each, as netem.NewGrouped builds them. Every host's engine runs on
// its process's clock g.LP(h), and the network runs with g.RunWhile. Sim
// is nil.
func NewSimNetworkGrouped(fc netem.Config, seed uint64, cfgFor func(host int) engine.Config, g *parallel.Group) (*SimNetwork, error) {
	fab, err := netem.NewGrouped(fc, g)
	if err != nil {
		return nil, err
	}
	n := &SimNetwork{Fabric: fab}
	if err := n.addHosts(fc, seed, cfgFor, g.LP); err != nil {
		return nil, err
	}
	return n, nil
}

// addHosts puts an engine on each of the fabric's hosts, host h's on
// clockOf(h).
func (n *SimNetwork) addHosts(fc netem.Config, seed uint64, cfgFor func(host int) engine.Config, clockOf func(int) *clock.Sim) error {
	fab := n.Fabric
	for h := 0; h < fc.Hosts; h++ {
		cfg := cfgFor(h)
		cfg.Planes = nil
		for p := 0; p < fc.Planes; p++ {
			cfg.Planes = append(cfg.Planes, netem.Addr(p, h))
		}
		cfg.Random = newSeeded(seed, uint64(2*h))
		ep, err := engine.NewEndpoint(cfg, clockOf(h), fab.Host(h))
		if err != nil {
			return err
		}
		fab.Host(h).Attach(ep)
		reg := NewRegistry(newSeeded(seed, uint64(2*h+1)))
		n.hosts = append(n.hosts, NewSoftware(ep, reg, SimRunner{Sim: clockOf(h), Quiet: n.Quiet}))
	}
	// Every host's NIC sees a plane's link state change. Over processes
	// each sees it on its own process.
	fab.OnPlaneChange(func(h, plane int, up bool) { n.hosts[h].ep.SetPlaneUp(plane, up) })
	return nil
}

// Device opens a device on host h's backend. Each call opens another,
// which closes only what was made through it.
func (n *SimNetwork) Device(h int) *endpoint.Device { return endpoint.Open(n.hosts[h]) }

// Backend is host h's software backend.
func (n *SimNetwork) Backend(h int) *Software { return n.hosts[h] }

// Remote is how host h is reached, by its address on every plane.
func (n *SimNetwork) Remote(h int) endpoint.Remote {
	r := endpoint.Remote{Port: n.hosts[h].ep.Config().Port}
	for p := 0; p < n.Fabric.Config().Planes; p++ {
		r.Planes = append(r.Planes, netem.Addr(p, h))
	}
	return r
}

// seededSource is a deterministic byte stream for ids, sequence numbers and
// keys in a simulation. Anything facing a real network uses crypto/rand.
type seededSource struct{ r *rand.ChaCha8 }

func newSeeded(seed, stream uint64) seededSource {
	var k [32]byte
	for i := 0; i < 8; i++ {
		k[i], k[8+i] = byte(seed>>(8*i)), byte(stream>>(8*i))
	}
	return seededSource{rand.NewChaCha8(k)}
}

func (s seededSource) Read(p []byte) (int, error) { return s.r.Read(p) }

// Quiet reports whether every host's engine has nothing to do but keep its
// connections alive (engine.Endpoint.Quiet), and no host has a timer of
// AfterFunc armed, such as a listener's accept deadline.
func (n *SimNetwork) Quiet() bool {
	for _, h := range n.hosts {
		if !h.ep.Quiet() || h.timers.Load() != 0 {
			return false
		}
	}
	return true
}
