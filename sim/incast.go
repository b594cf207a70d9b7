package sim

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// IncastConfig is an N:1 incast. N senders WRITE Bytes each to one
// receiver at the same moment, through one switch.
type IncastConfig struct {
	Senders int
	Bytes   int
	// LinkRate is every link's rate in bits/s. Links sets the delay,
	// every queue's DCTCP marking threshold and buffer, and the largest
	// payload of a data packet.
	LinkRate int64
	Links
	// NoRateHints stops the receiver's rate hints, leaving the senders'
	// windows alone.
	NoRateHints bool
	// Baseline runs every sender in the RoCEv2-like baseline mode, with
	// one path, go-back-N and DCQCN. PFC makes the fabric lossless, as
	// RoCEv2 was built to run on. The switch then pauses the uplinks that
	// feed it.
	Baseline, PFC bool
	// Stagger delays sender i's start by i x Stagger. With two senders it
	// gives a long flow joined by a second. Convergence then counts from
	// the last sender's first packet.
	Stagger time.Duration
	// StartJitter delays each sender's start, after its stagger, by a time
	// drawn from the seed, uniform in [0, StartJitter): the hosts of a
	// real job never start at one instant. Convergence then counts from
	// the last sender's first packet, as with a stagger.
	StartJitter time.Duration
	Seed        uint64
	// RealPayloads makes the engines copy and checksum every payload byte,
	// as on a real wire. By default payloads are placeholders.
	RealPayloads bool
	// Tracer, when set, hears of every engine's decisions
	// (engine.Config.Tracer).
	Tracer engine.Tracer
	// Trace, when set, sees every sampled rate window from the first data
	// packet on. It gets the window's start in base RTTs, every sender's
	// delivered rate and the fair share in bytes/s, and the deepest the
	// receiver's downlink queue was in the window, in bytes.
	Trace func(start float64, rates []float64, fair float64, queue int)
}

// DefaultIncast returns the design's incast at N senders and rate.
func DefaultIncast(n int, rate int64) IncastConfig {
	return IncastConfig{Senders: n, Bytes: 2 << 20, LinkRate: rate, Links: DefaultLinks(), Seed: 1}
}

// Mode names the variant. It is mroce with or without hints, or the
// baseline on the lossless PFC fabric or on the lossy one.
func (c IncastConfig) Mode() string {
	switch {
	case c.Baseline && c.PFC:
		return "baseline, PFC fabric"
	case c.Baseline:
		return "baseline, lossy fabric"
	case c.NoRateHints:
		return "mroce without hints"
	}
	return "mroce"
}

// IncastResult is what an incast run measured.
type IncastResult struct {
	Config IncastConfig
	// BaseRTT is the unloaded round trip of one full packet.
	BaseRTT time.Duration
	// Window is the rate measurement window.
	Window time.Duration
	// Convergence is the time in base RTTs from the first data packet
	// until every sender's rate delivered on the receiver's downlink
	// stays within 10% of its fair share. It is NaN when that never
	// happens. SendConvergence is the same for the rates the senders put
	// on their uplinks.
	Convergence, SendConvergence float64
	// Jain is Jain's fairness index of the senders' rates over the window
	// that starts 10 base RTTs after the first packet.
	Jain float64
	// PeakQueue is the receiver's downlink queue high-water mark in bytes.
	PeakQueue int
	// Drops counts the datagrams the fabric dropped, and
	// DropsAfterFirstRTT those after the first base RTT.
	Drops, DropsAfterFirstRTT int
	// Retransmits counts the data packets all senders sent again, for a
	// gap, a tail probe, a timeout or go-back-N.
	Retransmits uint64
	// SlowestFCT is the last sender's completion time. Ideal is the wire
	// bytes of all senders at the bottleneck plus one base RTT, and
	// FCTRatio the one over the other.
	SlowestFCT, Ideal time.Duration
	FCTRatio          float64
	// Goodput is the bytes delivered per second, start to last completion.
	Goodput float64
}

func (r IncastResult) String() string {
	return fmt.Sprintf("N=%d %s %s: converge %.1f RTT (sending %.1f), Jain %.3f, peak queue %d KiB, drops %d (%d after 1st RTT), resent %d, FCT/ideal %.3f",
		r.Config.Senders, gbps(r.Config.LinkRate), r.Config.Mode(), r.Convergence, r.SendConvergence, r.Jain,
		r.PeakQueue>>10, r.Drops, r.DropsAfterFirstRTT, r.Retransmits, r.FCTRatio)
}

func gbps(r int64) string { return fmt.Sprintf("%g Gb/s", float64(r)/1e9) }

// Incast runs one N:1 incast.
func Incast(cfg IncastConfig) (IncastResult, error) {
	r := &incastRun{cfg: cfg, n: cfg.Senders, rx: cfg.Senders, ps: sizeFor(cfg.MTU), res: IncastResult{Config: cfg}, first: -1, lastFirst: -1}
	if err := r.buildWorld(); err != nil {
		return r.res, err
	}
	if err := r.connectSenders(); err != nil {
		return r.res, err
	}
	r.setWindow()
	r.record()
	r.post()
	if !r.w.run(time.Second, r.done) || r.postErr != nil {
		return r.res, fmt.Errorf("incast did not finish: %v", r.postErr)
	}
	if err := r.completions(); err != nil {
		return r.res, err
	}
	r.rates()
	return r.res, nil
}

// incastSample is a data packet a sender got onto a link.
type incastSample struct {
	at     clock.Time
	sender int
	bytes  int
}

// queueSample is a queue's depth in bytes from a time on.
type queueSample struct {
	at    clock.Time
	bytes int
}

// incastRun is the state of one Incast. Its steps are methods, called in
// the order Incast lists them.
type incastRun struct {
	cfg IncastConfig
	res IncastResult
	ps  packetSize
	// n is the number of senders, and rx the receiver's host, after them.
	n, rx int
	// capacity is a link's rate in wire bytes/s, and payloadShare the part
	// of it that full packets' payloads take.
	capacity, payloadShare float64

	w     *world
	evs   []*events
	conns []*engine.Conn
	down  *netem.Link // the receiver's downlink

	// samples are the data packets the receiver's downlink delivered, and
	// sent those the senders put on their uplinks. queue is the
	// downlink's depth after each of its events, and dropTimes when the
	// fabric dropped a data packet.
	samples, sent []incastSample
	queue         []queueSample
	dropTimes     []clock.Time
	// first is when the first data packet crossed the downlink, and
	// lastFirst when the last sender's first did. Both are -1 until then.
	first, lastFirst clock.Time

	start   clock.Time
	postErr error
}

// buildWorld builds the fabric of n senders and the receiver on one
// switch.
func (r *incastRun) buildWorld() error {
	cfg, ps := r.cfg, r.ps
	link := netem.LinkConfig{Rate: cfg.LinkRate, Delay: cfg.Delay, Queue: cfg.Links.queue(cfg.Buffer)}
	fc := netem.Config{Seed: cfg.Seed, Hosts: r.n + 1, Planes: 1, Uplink: link, Downlink: link, MaxDatagram: ps.maxPacket(),
		SharedBuffer: cfg.Links.shared()}
	if cfg.PFC {
		// The switch pauses an uplink past 64 KiB of its bytes waiting
		// and resumes it at 32 KiB. A host's own queue is its memory.
		fc.Uplink.Queue = netem.QueueConfig{PFC: &netem.PFC{XOff: 64 << 10, XOn: 32 << 10}}
	}
	r.capacity = float64(cfg.LinkRate) / 8
	r.payloadShare = ps.payloadShare()
	w, err := newWorld(fc, cfg.Seed, cfg.RealPayloads, func(h int) engine.Config {
		c := engine.Config{Paths: 8, Streams: 1, MaxPacket: ps.maxPacket(), NoProgress: time.Second,
			LineRate: float64(cfg.LinkRate) / 8, Tracer: cfg.Tracer}
		if cfg.Baseline {
			c.Mode = proto.ModeBaseline
		}
		if h == r.n {
			// The receiver shares its downlink's payload rate. While the
			// queue its senders' first windows built marks, it holds some
			// back, and the queue drains (engine/inbound.go).
			c.InboundCapacity = r.capacity * r.payloadShare
			c.NoRateHints = cfg.NoRateHints
		} else {
			c.OutboundCapacity = engine.Headroom * r.capacity * r.payloadShare
		}
		return c
	})
	r.w = w
	return err
}

// connectSenders connects every sender to the receiver.
func (r *incastRun) connectSenders() error {
	r.w.listen(r.rx)
	r.evs = make([]*events, r.n)
	r.conns = make([]*engine.Conn, r.n)
	for s := 0; s < r.n; s++ {
		r.evs[s] = &events{sim: r.w.sim}
		var err error
		if r.conns[s], err = r.w.connect(s, r.rx, r.evs[s]); err != nil {
			return err
		}
	}
	return nil
}

// setWindow sets the base RTT and the rate window. The base RTT crosses
// two links each way, with a full packet out and an ACK back. The window
// is max(1 base RTT, 10 x N x MTU / capacity).
func (r *incastRun) setWindow() {
	cfg, ps := r.cfg, r.ps
	ser := func(bytes int) time.Duration { return time.Duration(float64(bytes*8) / float64(cfg.LinkRate) * 1e9) }
	// The ACK carries its headers and one record.
	r.res.BaseRTT = 4*cfg.Delay + 2*ser(ps.wire()) + 2*ser(44+52+netem.DefaultOverhead)
	r.res.Window = max(r.res.BaseRTT, time.Duration(10*float64(r.n)*float64(ps.wire())/r.capacity*1e9))
}

// senderOf is the sender of a datagram, read from its source address.
func senderOf(d *link.Datagram) int {
	a := d.Src.Addr().As4()
	return int(a[2])<<8 | int(a[3])
}

// record taps the fabric for the data packets the receiver's downlink
// delivers, those the senders send, the drops, and the downlink's queue.
func (r *incastRun) record() {
	r.down = r.w.fab.Downlink(0, r.rx)
	uplinks := map[*netem.Link]int{}
	for s := 0; s < r.n; s++ {
		uplinks[r.w.fab.Uplink(0, s)] = s
	}
	r.w.fab.AddTap(func(e *netem.TapEvent) {
		if e.Link == r.down {
			r.queue = append(r.queue, queueSample{e.At, r.down.QueueBytes()})
		}
		d := e.Datagram
		if len(d.Data) < 2 || !proto.Type(d.Data[1]).IsData() {
			return
		}
		switch {
		case e.Verdict == netem.Dropped:
			r.dropTimes = append(r.dropTimes, e.At)
		case e.Verdict == netem.Sent && e.Link == r.down:
			if r.first < 0 {
				r.first = e.At
			}
			r.samples = append(r.samples, incastSample{e.At, senderOf(d), d.Size()})
		case e.Verdict == netem.Sent:
			if s, ok := uplinks[e.Link]; ok {
				r.sent = append(r.sent, incastSample{e.At, s, d.Size()})
			}
		}
	})
}

// post posts every sender's WRITE into its own part of the receiver's
// region, at once, staggered or jittered. When the senders start apart it
// also watches for the last one's first packet on the downlink.
func (r *incastRun) post() {
	cfg, w := r.cfg, r.w
	dst := w.hosts[r.rx].region(r.n*cfg.Bytes, memreg.LocalWrite|memreg.RemoteWrite)
	r.start = w.sim.Now()
	jitter := startJitter(cfg.Seed, cfg.StartJitter)
	last, lastAt := 0, time.Duration(0) // the sender that starts last, and when
	for s := 0; s < r.n; s++ {
		src := w.hosts[s].region(cfg.Bytes, memreg.LocalWrite)
		post := func() {
			err := r.conns[s].Post(engine.SendWR{ID: 1, Op: engine.OpWrite, Local: engine.SGE{Region: src, Length: uint32(cfg.Bytes)},
				RKey: dst.Key(), RemoteOffset: uint64(s * cfg.Bytes)})
			if err != nil && r.postErr == nil {
				r.postErr = err
			}
		}
		at := time.Duration(s)*cfg.Stagger + jitter()
		if at >= lastAt {
			last, lastAt = s, at
		}
		if at == 0 {
			post()
			continue
		}
		w.sim.NewTimer(post).Reset(r.start.Add(at))
	}
	if lastAt > 0 {
		w.fab.AddTap(func(e *netem.TapEvent) {
			d := e.Datagram
			if r.lastFirst < 0 && e.Verdict == netem.Sent && e.Link == r.down && len(d.Data) > 1 && proto.Type(d.Data[1]).IsData() &&
				senderOf(d) == last {
				r.lastFirst = e.At
			}
		})
	}
}

// done reports whether every sender's WRITE has completed or failed.
func (r *incastRun) done() bool {
	for _, e := range r.evs {
		if e.done == 0 && e.failed == nil {
			return false
		}
	}
	return true
}

// completions measures the completion times, goodput, queue and drops.
// When the senders start apart, the measurements count from the last
// one's first packet.
func (r *incastRun) completions() error {
	cfg, res := r.cfg, &r.res
	if r.lastFirst >= 0 {
		r.first = r.lastFirst
	}
	var last clock.Time
	for s := range r.conns {
		res.Retransmits += r.conns[s].SenderStats().Retransmits
	}
	for s, e := range r.evs {
		if e.failed != nil {
			return fmt.Errorf("sender %d: %w", s, e.failed)
		}
		last = max(last, e.at)
	}
	res.SlowestFCT = last.Sub(r.start)
	res.Ideal = time.Duration(float64(r.n*cfg.Bytes)/float64(r.ps.mtu)*float64(r.ps.wire())/r.capacity*1e9) + res.BaseRTT
	res.FCTRatio = float64(res.SlowestFCT) / float64(res.Ideal)
	res.Goodput = float64(r.n*cfg.Bytes) / res.SlowestFCT.Seconds()
	res.PeakQueue = r.down.Stats().QueueHighWater
	for _, t := range r.dropTimes {
		res.Drops++
		if t > r.first+clock.Time(res.BaseRTT) {
			res.DropsAfterFirstRTT++
		}
	}
	return nil
}

// rates measures each sender's rate over sliding windows, sampled every
// eighth of a window. From them come the convergence, the trace and
// Jain's index.
func (r *incastRun) rates() {
	res := &r.res
	win := clock.Time(res.Window)
	fair := r.capacity * r.payloadShare / float64(r.n)
	step := win / 8
	rates := make([]float64, r.n)
	// A datagram's bytes are spread over its serialization on the
	// downlink, so a window's edge cuts it in proportion. Counting whole
	// packets would make every rate jump by a tenth.
	serDown := func(bytes int) clock.Time { return clock.Time(float64((bytes+66)*8) / float64(r.cfg.LinkRate) * 1e9) }
	// rateIn is each sender's rate in bytes/s over (t-win, t]. It reuses
	// one slice.
	rateIn := func(samples []incastSample, t clock.Time) []float64 {
		clear(rates)
		for _, s := range samples {
			end := s.at
			begin := end - serDown(s.bytes)
			lo, hi := max(begin, t-win), min(end, t)
			if hi > lo {
				rates[s.sender] += float64(s.bytes) * float64(hi-lo) / float64(end-begin)
			}
		}
		for i := range rates {
			rates[i] /= time.Duration(win).Seconds()
		}
		return rates
	}
	lastSeen := make([]clock.Time, r.n)
	for _, smp := range r.samples {
		lastSeen[smp.sender] = max(lastSeen[smp.sender], smp.at)
	}
	firstDone := slices.Min(lastSeen)
	horizon := clock.Time(20 * time.Microsecond) // engine.Config's default HintHorizon
	converge := func(samples []incastSample) float64 {
		c := math.NaN()
		// Fair shares change before the first sender's last packet. Once
		// its backlog is under a horizon's worth, its demand drops and the
		// receiver gives the others more. The steady phase ends there, and
		// its last window one window before.
		for t := r.first + win; t <= firstDone-horizon-win; t += step {
			ok := true
			for _, x := range rateIn(samples, t) {
				if math.Abs(x-fair) > 0.1*fair {
					ok = false
				}
			}
			switch {
			case !ok:
				c = math.NaN()
			case math.IsNaN(c):
				c = float64(t-win-r.first) / float64(res.BaseRTT)
			}
		}
		return c
	}
	if r.cfg.Trace != nil {
		for t := r.first + win; t <= firstDone; t += step {
			r.cfg.Trace(float64(t-win-r.first)/float64(res.BaseRTT), rateIn(r.samples, t), fair, deepest(r.queue, t-win, t))
		}
	}
	res.Convergence = converge(r.samples)
	res.SendConvergence = converge(r.sent)
	res.Jain = jain(rateIn(r.samples, r.first+clock.Time(10*res.BaseRTT)+win))
}

// deepest is the queue's greatest depth in [from, to). That is the depth
// it had at from, or any depth it took after.
func deepest(q []queueSample, from, to clock.Time) int {
	i := sort.Search(len(q), func(i int) bool { return q[i].at >= from })
	d := 0
	if i > 0 {
		d = q[i-1].bytes
	}
	for ; i < len(q) && q[i].at < to; i++ {
		d = max(d, q[i].bytes)
	}
	return d
}

// jain is Jain's fairness index, 1 when all are equal.
func jain(x []float64) float64 {
	var s, s2 float64
	for _, v := range x {
		s += v
		s2 += v * v
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(x)) * s2)
}

// IncastOptions are the incast scenario's settings.
type IncastOptions struct {
	Senders []int
	Rates   []int64
	Bytes   int
	Links
	Seed         uint64
	StartJitter  time.Duration // as IncastConfig's
	RealPayloads bool          // as IncastConfig's
	Tracer       engine.Tracer // as IncastConfig's, for the first run alone: mroce, the first N and rate
	Jobs         int           // runs at once
}

// DefaultIncastScenario is the incast scenario of docs/results.md.
func DefaultIncastScenario() IncastOptions {
	return IncastOptions{Senders: []int{8, 64}, Rates: []int64{100e9, 400e9}, Bytes: 2 << 20, Links: DefaultLinks(), Seed: 1}
}

// IncastScenarioResult is what the incast scenario measured.
type IncastScenarioResult struct {
	Options IncastOptions
	// Runs go N by N, then rate by rate, then variant by variant. The
	// variants are mroce, mroce without the receiver's hints, the
	// baseline on the PFC fabric and the baseline on the lossy one.
	Runs []IncastResult
	// Trace follows the first mroce run at the largest N, an entry a
	// window.
	Trace []IncastWindow
}

// IncastWindow is one rate window of an incast's trace.
type IncastWindow struct {
	Start float64 // base RTTs from the first data packet to the window's start
	// Slowest, Mean and Fastest are the senders' delivered rates over
	// their fair share.
	Slowest, Mean, Fastest float64
	QueueKiB               float64 // deepest receiver's downlink queue in the window
}

// incastVariants are the incast scenario's variants of each N and rate,
// in the order of its runs.
var incastVariants = []IncastConfig{{}, {NoRateHints: true}, {Baseline: true, PFC: true}, {Baseline: true}}

// IncastScenario runs N:1 incasts side by side. It runs mroce, mroce
// without the receiver's hints, the baseline on the PFC fabric and the
// baseline on the lossy one. The trace follows the first mroce run at the
// largest N, with the slowest, mean and fastest sender's delivered rate
// over fair share, window by window.
func IncastScenario(o IncastOptions) (IncastScenarioResult, error) {
	res := IncastScenarioResult{Options: o}
	nMax := 0
	for _, n := range o.Senders {
		nMax = max(nMax, n)
	}
	var runs []IncastConfig
	for _, n := range o.Senders {
		for ri, rate := range o.Rates {
			for vi, v := range incastVariants {
				cfg := DefaultIncast(n, rate)
				cfg.Bytes, cfg.Seed, cfg.RealPayloads, cfg.StartJitter = o.Bytes, o.Seed, o.RealPayloads, o.StartJitter
				if len(runs) == 0 {
					cfg.Tracer = o.Tracer // the first run's alone
				}
				cfg.Links = o.Links
				cfg.NoRateHints, cfg.Baseline, cfg.PFC = v.NoRateHints, v.Baseline, v.PFC
				if n == nMax && ri == 0 && vi == 0 { // only the traced run writes the trace
					cfg.Trace = func(start float64, rates []float64, fair float64, bytes int) {
						lo, hi, sum := math.Inf(1), 0.0, 0.0
						for _, r := range rates {
							lo, hi, sum = math.Min(lo, r), math.Max(hi, r), sum+r
						}
						res.Trace = append(res.Trace, IncastWindow{Start: start, Slowest: lo / fair,
							Mean: sum / float64(len(rates)) / fair, Fastest: hi / fair, QueueKiB: float64(bytes) / 1024})
					}
				}
				runs = append(runs, cfg)
			}
		}
	}
	results, err := runEach(o.Jobs, len(runs), func(i int) (IncastResult, error) {
		cfg := runs[i]
		r, err := Incast(cfg)
		if err != nil {
			err = fmt.Errorf("incast %d at %g Gb/s, %s: %w", cfg.Senders, float64(cfg.LinkRate)/1e9, cfg.Mode(), err)
		}
		return r, err
	})
	if err != nil {
		return IncastScenarioResult{}, err
	}
	for i := range results {
		results[i].Config.Trace = nil // the run is over and nothing calls it
	}
	res.Runs = results
	return res, nil
}
