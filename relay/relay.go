// Package relay emulates a network for machines without root or without
// Linux's namespaces. It is a UDP relay that runs netem's pipeline in real
// time between unmodified UDP endpoints.
//
// Every emulated host h has, on each plane p, a real address R(h, p) where
// its own sockets are bound, and a virtual address V(h, p) that the others
// send to. The relay binds the configured ports on every virtual address.
// A datagram from R(a, p):x to V(b, p):y enters the fabric as host a's, on
// plane p with source port x and destination port y, so ECMP inside the
// plane sees the 5-tuple. If the fabric delivers it, it leaves the relay
// from V(a, p):x to R(b, p):y, with the ECN field the queues left. Ports
// are kept, so each source port stays a distinct path, and b's replies to
// V(a, p):x come back the same way. The relay's sockets are the UDP
// driver's, batched, with GSO and GRO, and ECN read and written per
// datagram.
//
// The default addresses are on the loopback network, which Linux answers
// for any 127.0.0.0/8 address without configuration. They are
// R(h, p) = 127.(10+p).0.(h+1) and V(h, p) = 127.(20+p).0.(h+1). Elsewhere,
// give addresses the machine has.
package relay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/udp"
)

// Config describes a relay.
type Config struct {
	// Hosts is 1 .. 254 and Planes is 1 .. 8.
	Hosts, Planes int
	// Real and Virtual are host h's addresses on plane p. Its sockets are
	// bound at the real address, and the others send to it at the virtual
	// one. Nil means the loopback defaults, RealAddr and VirtualAddr.
	Real, Virtual func(h, p int) netip.Addr
	// Ports are the UDP ports the hosts use, as receivers and as sources.
	// For mroce they are its receive port and its source-port pool. The
	// relay binds each on every virtual address. A datagram from another
	// port cannot be carried and is counted in Stats.Unmapped.
	Ports []uint16
	// Fabric is netem's configuration. Start sets its Hosts, Planes and
	// MaxDatagram.
	Fabric netem.Config
}

// RealAddr is the default real address of host h on plane p.
func RealAddr(h, p int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(10 + p), 0, byte(h + 1)})
}

// VirtualAddr is the default virtual address of host h on plane p.
func VirtualAddr(h, p int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(20 + p), 0, byte(h + 1)})
}

// Stats are the relay's counters.
type Stats struct {
	Relayed   uint64 // datagrams that entered the fabric
	Delivered uint64 // datagrams the fabric delivered and the relay sent on
	// Unknown counts datagrams from an address that is no host's real
	// address on the plane they were sent to. They are dropped.
	Unknown uint64
	// Unmapped counts delivered datagrams whose source port is not in
	// Ports, so the relay has no socket for it. They are dropped.
	Unmapped uint64
}

type place struct{ host, plane int }

// Relay is a running relay.
type Relay struct {
	cfg     Config
	loop    *clock.Loop
	fab     *netem.Fabric
	drv     *udp.Driver
	real    map[netip.Addr]place
	virtual map[netip.Addr]place
	one     []link.Datagram // a batch of one, reused
	stats   Stats           // loop goroutine only

	done      chan struct{}
	stop      func()
	closeOnce sync.Once
}

// Start binds the relay's sockets and starts relaying.
func Start(cfg Config) (*Relay, error) {
	if cfg.Hosts < 1 || cfg.Hosts > 254 || cfg.Planes < 1 || cfg.Planes > 8 {
		return nil, fmt.Errorf("relay: %d hosts and %d planes: want 1 .. 254 and 1 .. 8", cfg.Hosts, cfg.Planes)
	}
	if len(cfg.Ports) == 0 {
		return nil, errors.New("relay: no ports")
	}
	if cfg.Real == nil {
		cfg.Real = RealAddr
	}
	if cfg.Virtual == nil {
		cfg.Virtual = VirtualAddr
	}
	r := &Relay{cfg: cfg, loop: clock.NewLoop(), real: map[netip.Addr]place{}, virtual: map[netip.Addr]place{},
		one: make([]link.Datagram, 1), done: make(chan struct{})}
	var planes []netip.Addr
	for h := 0; h < cfg.Hosts; h++ {
		for p := 0; p < cfg.Planes; p++ {
			ra, va := cfg.Real(h, p), cfg.Virtual(h, p)
			if _, dup := r.real[ra]; dup {
				return nil, fmt.Errorf("relay: real address %v given twice", ra)
			}
			if _, dup := r.virtual[va]; dup {
				return nil, fmt.Errorf("relay: virtual address %v given twice", va)
			}
			r.real[ra], r.virtual[va] = place{h, p}, place{h, p}
			planes = append(planes, va)
		}
	}
	for va := range r.virtual {
		if _, both := r.real[va]; both {
			return nil, fmt.Errorf("relay: %v is both a real and a virtual address", va)
		}
	}
	drv, err := udp.New(udp.Config{Planes: planes, Port: cfg.Ports[0], SourcePorts: cfg.Ports[1:]}, r.loop)
	if err != nil {
		return nil, err
	}
	r.drv = drv
	fc := cfg.Fabric
	fc.Hosts, fc.Planes, fc.MaxDatagram = cfg.Hosts+1, cfg.Planes, drv.MaxDatagram()
	if r.fab, err = netem.New(fc, r.loop); err != nil {
		drv.Close()
		return nil, err
	}
	for h := 0; h < cfg.Hosts; h++ {
		r.fab.Host(h + 1).Attach(link.ReceiverFunc(r.deliver))
	}
	drv.Start(link.ReceiverFunc(r.arrive))
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() {
		r.loop.Run(ctx)
		close(r.done)
	}()
	return r, nil
}

// arrive runs on the loop for every datagram a relay socket receives. The
// datagram enters the fabric at its sender's host.
func (r *Relay) arrive(d *link.Datagram, _ clock.Time) {
	from, ok1 := r.real[d.Src.Addr()]
	to, ok2 := r.virtual[d.Dst.Addr()]
	if !ok1 || !ok2 || from.plane != to.plane {
		r.stats.Unknown++
		return
	}
	host := r.fab.Host(from.host + 1)
	r.one[0] = link.Datagram{
		Src:  netip.AddrPortFrom(netem.Addr(from.plane, from.host+1), d.Src.Port()),
		Dst:  netip.AddrPortFrom(netem.Addr(to.plane, to.host+1), d.Dst.Port()),
		ECN:  d.ECN,
		DSCP: d.DSCP,
		Data: append(host.Buffer(), d.Data...),
	}
	r.stats.Relayed++
	host.Send(r.one)
	r.one[0] = link.Datagram{}
}

// deliver runs on the loop when the fabric delivers a datagram. The datagram
// leaves from the sender's virtual address and port for the receiver's real
// one.
func (r *Relay) deliver(d *link.Datagram, _ clock.Time) {
	src, dst := d.Src.Addr().As4(), d.Dst.Addr().As4()
	plane := int(src[1])
	from, to := int(src[2])<<8|int(src[3])-1, int(dst[2])<<8|int(dst[3])-1
	out := link.Datagram{
		Src:  netip.AddrPortFrom(r.cfg.Virtual(from, plane), d.Src.Port()),
		Dst:  netip.AddrPortFrom(r.cfg.Real(to, plane), d.Dst.Port()),
		ECN:  d.ECN,
		DSCP: d.DSCP,
	}
	if !r.hasPort(out.Src.Port()) {
		r.stats.Unmapped++
		return
	}
	out.Data = append(r.drv.Buffer(), d.Data...)
	r.stats.Delivered++
	r.one[0] = out
	r.drv.Send(r.one) // held until the end of the loop's turn
	r.one[0] = link.Datagram{}
}

func (r *Relay) hasPort(port uint16) bool {
	for _, p := range r.cfg.Ports {
		if p == port {
			return true
		}
	}
	return false
}

// Do runs f on the relay's loop with its fabric, for faults or counters, and
// waits for it.
func (r *Relay) Do(f func(fab *netem.Fabric)) {
	done := make(chan struct{})
	r.loop.Post(func() { f(r.fab); close(done) })
	select {
	case <-done:
	case <-r.done:
	}
}

// Stats returns the relay's counters.
func (r *Relay) Stats() (st Stats) {
	r.Do(func(*netem.Fabric) { st = r.stats })
	return st
}

// DriverStats returns the counters of the relay's sockets.
func (r *Relay) DriverStats() (st udp.Stats) {
	r.Do(func(*netem.Fabric) { st = r.drv.Stats() })
	return st
}

// Close stops the relay and closes its sockets.
func (r *Relay) Close() error {
	var err error
	r.closeOnce.Do(func() {
		r.stop()
		<-r.done
		err = r.drv.Close()
	})
	return err
}
