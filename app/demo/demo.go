// Package demo runs the transfer mroce demo shows, a WRITE between two
// hosts of the emulated fabric in virtual time with random loss on every
// downlink.
//
// It runs in one process without root or a network, and it repeats
// exactly for a seed, so a newcomer can watch spraying and loss recovery
// and get the same figures every time.
package demo

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/mroce/mroce/app/xferstats"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// Options describe the fabric and the transfer.
type Options struct {
	SizeMiB, Planes, Paths, Streams int
	// Loss is the probability that a downlink drops a packet, data and
	// acks alike.
	Loss     float64
	RateGbps float64
	Delay    time.Duration
	// Interval is the virtual time between ticks. Zero asks for none.
	Interval time.Duration
	Seed     uint64
	// Tracer, when set, hears of both hosts' engines' decisions
	// (engine.Config.Tracer).
	Tracer engine.Tracer
}

// Result is the finished transfer.
type Result struct {
	Size int
	// Elapsed is virtual time from the first WRITE to the last completion.
	Elapsed time.Duration
	// SHA256 is the data's, which arrived equal to what was sent.
	SHA256 [32]byte
	// LostData counts the data packets the fabric dropped, to set beside
	// the retransmissions in Telemetry.
	LostData  uint64
	Telemetry []endpoint.PathTelemetry
	Intervals []xferstats.Interval
}

// pair is the demo's two hosts with the connection and regions between
// them.
type pair struct {
	net      *software.SimNetwork
	qp       *endpoint.QP
	cq       *endpoint.CQ
	src, dst *endpoint.MR
	lostData uint64
}

// Run WRITEs Size MiB from host 0 to host 1, split over the streams, and
// checks that the bytes arrived. It calls tick with each interval as the
// virtual clock passes it.
func Run(ctx context.Context, o Options, tick func(xferstats.Interval)) (Result, error) {
	if o.SizeMiB < 1 || o.Streams < 1 || o.Planes < 1 {
		return Result{}, errors.New("demo: want a size, a stream and a plane at least")
	}
	p, err := connect(ctx, o)
	if err != nil {
		return Result{}, err
	}
	size := o.SizeMiB << 20
	var meter xferstats.Meter
	start := p.net.Sim.Now()
	// The intervals count the bytes the paths carried, headers aside. The
	// fabric's goodput is the same but for resends.
	closeInterval := func() {
		tel := p.qp.Telemetry()
		var sent uint64
		for _, t := range tel {
			sent += t.BytesSent
		}
		meter.Progress(int64(sent))
		iv := meter.TickAt(tel, p.net.Sim.Now().Sub(start).Seconds())
		if tick != nil {
			tick(iv)
		}
	}
	if err := p.write(ctx, o, size, start, closeInterval); err != nil {
		return Result{}, err
	}
	res := Result{Size: size, Elapsed: p.net.Sim.Now().Sub(start), LostData: p.lostData}
	if o.Interval > 0 {
		closeInterval()
	}
	res.SHA256 = sha256.Sum256(p.dst.Bytes())
	if res.SHA256 != sha256.Sum256(p.src.Bytes()) {
		return res, errors.New("demo: the data received differs from the data sent")
	}
	res.Telemetry, res.Intervals = p.qp.Telemetry(), meter.Intervals()
	return res, nil
}

// connect builds the fabric, connects host 0 to host 1 and registers the
// regions, the source filled with seeded bytes.
func connect(ctx context.Context, o Options) (*pair, error) {
	// Queues mark ECN above 200 KiB, DCTCP's step marking, so that the
	// windows see congestion before the queues overflow.
	link := netem.LinkConfig{Rate: int64(o.RateGbps * 1e9), Delay: o.Delay,
		Queue: netem.QueueConfig{Limit: 4 << 20, ECNThreshold: 200 << 10}}
	fc := netem.Config{Seed: o.Seed, Hosts: 2, Planes: o.Planes, Uplink: link, Downlink: link}
	if o.Loss > 0 {
		fc.Downlink.Impair.Loss = &netem.RandomLoss{P: o.Loss}
	}
	// The receiver's hints share 98% of its planes' payload rate, a 4 KiB
	// payload in 4,160 bytes of packet and 66 of framing.
	inbound := 0.98 * float64(o.Planes) * o.RateGbps * 1e9 / 8 * 4096 / (4160 + 66)
	net, err := software.NewSimNetwork(fc, engine.Config{Paths: o.Paths, Streams: o.Streams, DSNWindow: 4096,
		InboundCapacity: inbound, LineRate: o.RateGbps * 1e9 / 8, Tracer: o.Tracer}, o.Seed)
	if err != nil {
		return nil, err
	}
	p := &pair{net: net}
	net.Fabric.AddTap(func(e *netem.TapEvent) {
		if e.Verdict == netem.Dropped && len(e.Datagram.Data) > 1 && proto.Type(e.Datagram.Data[1]).IsData() {
			p.lostData++
		}
	})
	sender, receiver := net.Device(0), net.Device(1)
	spd, _ := sender.AllocPD()
	rpd, _ := receiver.AllocPD()
	p.cq = sender.CreateCQ(o.Streams + 8)
	rcq := receiver.CreateCQ(8)
	lis, err := rpd.Listen(rcq, rcq, endpoint.QPOptions{})
	if err != nil {
		return nil, err
	}
	if p.qp, err = spd.Connect(ctx, net.Remote(1), p.cq, p.cq, endpoint.QPOptions{}); err != nil {
		return nil, err
	}
	// The receiver exposes a region to the WRITEs, for this connection
	// alone (docs/spec.md section 5.1).
	served, err := lis.Accept(ctx)
	if err != nil {
		return nil, err
	}
	size := o.SizeMiB << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{byte(o.Seed), byte(o.Seed >> 8)}).Read(data)
	if p.src, err = spd.RegisterMR(data, endpoint.LocalWrite); err != nil {
		return nil, err
	}
	if p.dst, err = served.RegisterMR(make([]byte, size), endpoint.LocalWrite|endpoint.RemoteWrite); err != nil {
		return nil, err
	}
	return p, nil
}

// write posts one WRITE a stream and waits for them all. With an interval
// it runs the simulation to each interval's end in turn and calls tick
// there, so that ticks fall on virtual time and not on completions.
func (p *pair) write(ctx context.Context, o Options, size int, start clock.Time, tick func()) error {
	chunk := size / o.Streams
	for s := 0; s < o.Streams; s++ {
		off, n := s*chunk, chunk
		if s == o.Streams-1 {
			n = size - off
		}
		if err := p.qp.PostWrite(uint64(s), uint16(s), p.src.SGE(uint64(off), uint32(n)), p.dst.RKey(), uint64(off)); err != nil {
			return err
		}
	}
	wcs := make([]endpoint.Completion, o.Streams)
	next := start.Add(o.Interval)
	now := p.net.Sim.Now
	for done := 0; done < o.Streams; {
		if o.Interval > 0 {
			if err := p.net.Backend(0).Progress(ctx, func() bool { return p.cq.Len() > 0 || now() >= next }); err != nil {
				return err
			}
			if now() >= next {
				tick()
				next = next.Add(o.Interval)
			}
			if p.cq.Len() == 0 {
				continue
			}
		}
		k, err := p.cq.Wait(ctx, wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:k] {
			if wc.Status != endpoint.StatusOK {
				return fmt.Errorf("demo: WRITE %d failed: %v: %v", wc.ID, wc.Status, wc.Err)
			}
		}
		done += k
	}
	return nil
}
