package sim

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/netem"
)

// CrossConfig is one connection spread one path per plane over Planes
// planes. Meanwhile a third host's cross traffic takes CrossShare of one
// plane's downlink to the same receiver. The cross traffic is not
// ECN-capable and does not respond to congestion.
type CrossConfig struct {
	Bytes      int
	Planes     int
	LinkRate   int64
	CrossShare float64
	Seed       uint64
	// RealPayloads makes the engines copy and checksum every payload byte,
	// as on a real wire. By default payloads are placeholders.
	RealPayloads bool
}

// CrossResult is what the run measured.
type CrossResult struct {
	Config CrossConfig
	// Goodput is the connection's. Left is the payload capacity left to
	// it, every plane's less what the cross traffic takes of one.
	Goodput, Left float64
	// ShareOnCrossed is the fraction of the connection's packets that went
	// to the crossed plane. Without steering it would be 1/Planes.
	ShareOnCrossed float64
}

func (r CrossResult) String() string {
	return fmt.Sprintf("%d planes of %s, cross traffic on one at %.0f%%: %.1f Gb/s of %.1f left (%.3f); %.1f%% of packets on the crossed plane",
		r.Config.Planes, gbps(r.Config.LinkRate), 100*r.Config.CrossShare, r.Goodput*8/1e9, r.Left*8/1e9,
		r.Goodput/r.Left, 100*r.ShareOnCrossed)
}

// blaster sends unresponsive datagrams at a fixed rate.
type blaster struct {
	w        *world
	src, dst netip.AddrPort
	size     int
	gap      time.Duration
	until    clock.Time
	batch    [1]link.Datagram
}

func (b *blaster) Fire() {
	if b.w.sim.Now() >= b.until {
		return
	}
	port := b.w.fab.Host(2)
	b.batch[0] = link.Datagram{Src: b.src, Dst: b.dst, Data: port.Buffer()[:b.size]}
	port.Send(b.batch[:])
	b.w.sim.After(b.gap, b)
}

// Cross runs the cross-traffic scenario.
func Cross(cfg CrossConfig) (CrossResult, error) {
	res := CrossResult{Config: cfg}
	l := netem.LinkConfig{Rate: cfg.LinkRate, Delay: time.Microsecond,
		Queue: netem.QueueConfig{Limit: 16 << 20, ECNThreshold: 200 << 10}}
	ps := sizeFor(DefaultMTU)
	fc := netem.Config{Seed: cfg.Seed, Hosts: 3, Planes: cfg.Planes, Uplink: l, Downlink: l, MaxDatagram: ps.maxPacket()}
	planeRate := float64(cfg.LinkRate) / 8 * ps.payloadShare()
	res.Left = planeRate * (float64(cfg.Planes) - cfg.CrossShare)
	w, err := newWorld(fc, cfg.Seed, cfg.RealPayloads, func(h int) engine.Config {
		c := engine.Config{Paths: cfg.Planes, Streams: 1, MaxPacket: ps.maxPacket(), NoProgress: time.Second}
		if h == 1 {
			c.InboundCapacity = engine.Headroom * planeRate * float64(cfg.Planes)
		}
		return c
	})
	if err != nil {
		return res, err
	}
	w.listen(1)
	ev := &events{sim: w.sim}
	conn, err := w.connect(0, 1, ev)
	if err != nil {
		return res, err
	}
	crossed := cfg.Planes - 1
	b := &blaster{w: w, src: netip.AddrPortFrom(netem.Addr(crossed, 2), 40000),
		dst: netip.AddrPortFrom(netem.Addr(crossed, 1), 9), size: ps.maxPacket(),
		gap:   time.Duration(float64(ps.wire()) * 8 / (cfg.CrossShare * float64(cfg.LinkRate)) * 1e9),
		until: clock.Never}
	w.sim.At(w.sim.Now(), b)
	w.run(100*time.Microsecond, func() bool { return false }) // the cross traffic settles in
	took, err := w.write(conn, ev, 0, 1, cfg.Bytes)
	if err != nil {
		return res, err
	}
	b.until = 0
	res.Goodput = float64(cfg.Bytes) / took.Seconds()
	var all, onCrossed uint64
	for _, t := range conn.Telemetry() {
		all += t.PacketsSent
		if t.Plane == crossed {
			onCrossed += t.PacketsSent
		}
	}
	res.ShareOnCrossed = float64(onCrossed) / float64(all)
	return res, nil
}
