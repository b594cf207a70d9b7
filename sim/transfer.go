package sim

import (
	"fmt"
	"time"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// TransferConfig is one connection moving Bytes from host 0 to host 1
// over Planes planes of LinkRate each, with Paths paths. Random loss hits
// every downlink, data and ACKs alike. Links sets the delay, DCTCP
// marking, buffers and MTU.
type TransferConfig struct {
	Bytes    int
	Planes   int
	Paths    int
	LinkRate int64
	Links
	Loss float64
	// Resend is the engines' Config.Resend: the path a lost packet is
	// resent on.
	Resend engine.ResendPolicy
	// EveryLink puts Loss on the uplinks as well as the downlinks.
	EveryLink bool
	Seed      uint64
	// RealPayloads makes the engines copy and checksum every payload byte,
	// as on a real wire. By default payloads are placeholders.
	RealPayloads bool
	// Tracer, when set, hears of both engines' decisions
	// (engine.Config.Tracer).
	Tracer engine.Tracer
	// Baseline runs the connection in the RoCEv2-like baseline mode, with
	// one path, go-back-N over a window of BaselineWindow packets, and
	// DCQCN. BaselineAckTimeout, when set, fixes its local ACK timeout as
	// engine.Config.LocalAckTimeout does. RoCEv2 sets it as
	// 4.096 µs x 2^n.
	Baseline           bool
	BaselineWindow     int
	BaselineAckTimeout time.Duration
	// PFC makes the fabric lossless for congestion, as the switch pauses
	// the uplinks that feed it. Random loss still drops.
	PFC bool
	// Burst makes the loss come in bursts with the same mean rate Loss.
	// By default the bursts follow Gilbert-Elliott with a mean of
	// BurstLen packets. With BurstTime set, they last that long on
	// average whether packets come or not.
	Burst     bool
	BurstLen  float64
	BurstTime time.Duration
}

// DefaultTransfer is a 64 MiB WRITE over 8 paths on 4 planes of 100 Gb/s.
func DefaultTransfer() TransferConfig {
	return TransferConfig{Bytes: 64 << 20, Planes: 4, Paths: 8, LinkRate: 100e9, Links: DefaultLinks(), Seed: 1}
}

// TransferResult is what a transfer measured.
type TransferResult struct {
	Config TransferConfig
	// Goodput is payload bytes per second from post to completion.
	Goodput float64
	// Bottleneck is the payload rate the planes can carry, every plane's
	// link rate less the headers of full packets.
	Bottleneck float64
	// Lost counts the data packets the fabric dropped, and Retransmits
	// the sender's resends.
	Lost, Retransmits uint64
}

// Efficiency is Goodput over Bottleneck.
func (r TransferResult) Efficiency() float64 { return r.Goodput / r.Bottleneck }

func (r TransferResult) String() string {
	mode := fmt.Sprintf("%d paths", r.Config.Paths)
	if r.Config.Baseline {
		mode = fmt.Sprintf("baseline (1 path, window %d)", r.Config.BaselineWindow)
		if r.Config.BaselineAckTimeout > 0 {
			mode = fmt.Sprintf("baseline (1 path, window %d, ACK timeout %v)", r.Config.BaselineWindow, r.Config.BaselineAckTimeout)
		}
	}
	return fmt.Sprintf("%d MiB, %s on %d x %s, %.1f%% loss: %.1f Gb/s goodput, %.3f of the bottleneck; %d lost, %d resent",
		r.Config.Bytes>>20, mode, r.Config.Planes, gbps(r.Config.LinkRate), 100*r.Config.Loss,
		r.Goodput*8/1e9, r.Efficiency(), r.Lost, r.Retransmits)
}

// Transfer runs one transfer.
func Transfer(cfg TransferConfig) (TransferResult, error) {
	res := TransferResult{Config: cfg}
	link := netem.LinkConfig{Rate: cfg.LinkRate, Delay: cfg.Delay, Queue: cfg.Links.queue(cfg.Buffer)}
	ps := sizeFor(cfg.MTU)
	fc := netem.Config{Seed: cfg.Seed, Hosts: 2, Planes: cfg.Planes, Uplink: link, Downlink: link, MaxDatagram: ps.maxPacket(),
		SharedBuffer: cfg.Links.shared()}
	switch {
	case cfg.Loss > 0 && cfg.Burst && cfg.BurstTime > 0:
		// Bad for BurstTime, good for long enough that a steady stream
		// loses Loss of its packets.
		good := time.Duration(min(float64(cfg.BurstTime)*(1-cfg.Loss)/cfg.Loss, float64(time.Hour)))
		fc.Downlink.Impair.Loss = &netem.TimedBursts{GoodTime: good, BadTime: cfg.BurstTime, LossBad: 1}
	case cfg.Loss > 0 && cfg.Burst:
		fc.Downlink.Impair.Loss = netem.BurstLoss(cfg.Loss, cfg.BurstLen)
	case cfg.Loss > 0:
		fc.Downlink.Impair.Loss = &netem.RandomLoss{P: cfg.Loss}
	}
	if cfg.EveryLink {
		fc.Uplink.Impair.Loss = fc.Downlink.Impair.Loss // each link draws its own losses
	}
	if cfg.PFC {
		fc.Uplink.Queue = netem.QueueConfig{PFC: &netem.PFC{XOff: 64 << 10, XOn: 32 << 10}}
	}
	planes := cfg.Planes
	if cfg.Baseline {
		planes = 1 // one path, so one plane carries it all
	}
	res.Bottleneck = float64(planes) * float64(cfg.LinkRate) / 8 * ps.payloadShare()
	w, err := newWorld(fc, cfg.Seed, cfg.RealPayloads, func(h int) engine.Config {
		// A CONNECT and its ACCEPT both cross links that lose a fifth of
		// their packets each way about two times in five, and the default
		// second of resends gives up on one handshake in eight. The run
		// measures the transfer, and a minute of resends, one a second
		// after the first few, costs nothing in virtual time.
		c := engine.Config{Paths: cfg.Paths, Streams: 1, MaxPacket: ps.maxPacket(), NoProgress: time.Second,
			LineRate: float64(cfg.LinkRate) / 8, ConnectTimeout: time.Minute, Resend: cfg.Resend, Tracer: cfg.Tracer}
		if h == 1 {
			c.InboundCapacity = engine.Headroom * res.Bottleneck
		}
		if cfg.Baseline {
			c.Mode, c.BaselineWindow = proto.ModeBaseline, cfg.BaselineWindow
			c.LocalAckTimeout = cfg.BaselineAckTimeout // 0 keeps the adaptive RTO
		}
		return c
	})
	if err != nil {
		return res, err
	}
	lost := countDataDrops(w.fab)
	w.listen(1)
	ev := &events{sim: w.sim}
	conn, err := w.connect(0, 1, ev)
	if err != nil {
		return res, err
	}
	took, err := w.write(conn, ev, 0, 1, cfg.Bytes)
	if err != nil {
		return res, err
	}
	res.Goodput = float64(cfg.Bytes) / took.Seconds()
	res.Lost, res.Retransmits = *lost, conn.SenderStats().Retransmits
	return res, nil
}

// write WRITEs bytes from host a to host b over conn, whose events are
// ev. It returns how long the WRITE took from post to completion.
func (w *world) write(conn *engine.Conn, ev *events, a, b, bytes int) (time.Duration, error) {
	src := w.hosts[a].region(bytes, memreg.LocalWrite)
	dst := w.hosts[b].region(bytes, memreg.LocalWrite|memreg.RemoteWrite)
	start := w.sim.Now()
	if err := conn.Post(engine.SendWR{ID: 1, Op: engine.OpWrite, Local: engine.SGE{Region: src, Length: uint32(bytes)}, RKey: dst.Key()}); err != nil {
		return 0, err
	}
	if !w.run(10*time.Second, func() bool { return ev.done > 0 || ev.failed != nil }) || ev.failed != nil {
		return 0, fmt.Errorf("transfer did not finish: %v", ev.failed)
	}
	return ev.at.Sub(start), nil
}

// countDataDrops counts the data packets the fabric drops.
func countDataDrops(f *netem.Fabric) *uint64 {
	var n uint64
	f.AddTap(func(e *netem.TapEvent) {
		if e.Verdict == netem.Dropped && len(e.Datagram.Data) > 1 && e.Datagram.Data[1] < 0x10 {
			n++
		}
	})
	return &n
}
