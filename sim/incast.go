package sim

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// IncastConfig is an N:1 incast: N senders WRITE Bytes each to one
// receiver at the same moment, through one switch.
type IncastConfig struct {
	Senders int
	Bytes   int
	// LinkRate (bits/s) of every link, and Links: its delay, every
	// queue's DCTCP marking threshold and buffer, the largest payload of a
	// data packet.
	LinkRate int64
	Links
	// NoRateHints: the receiver sends no rate hints (the senders' windows
	// alone).
	NoRateHints bool
	// Baseline runs every sender in baseline mode (RoCEv2-like: one path,
	// go-back-N, DCQCN); PFC makes the fabric lossless (the switch pauses
	// the uplinks that feed it), as RoCEv2 was built to run on.
	Baseline, PFC bool
	// Stagger delays sender i's start by i x Stagger: with two senders,
	// a long flow joined by a second. Convergence then counts from the
	// last sender's first packet.
	Stagger time.Duration
	Seed    uint64
	// RealPayloads makes the engines copy and checksum every payload byte,
	// as on a real wire; by default payloads are placeholders (newWorld).
	RealPayloads bool
	// Trace, when set, sees every sampled rate window from the first data
	// packet on: its start in base RTTs, every sender's delivered rate and
	// the fair share (bytes/s), and the receiver's downlink queue at its
	// deepest in the window (bytes).
	Trace func(start float64, rates []float64, fair float64, queue int)
}

// DefaultIncast returns the design's incast at N senders and rate.
func DefaultIncast(n int, rate int64) IncastConfig {
	return IncastConfig{Senders: n, Bytes: 2 << 20, LinkRate: rate, Links: DefaultLinks(), Seed: 1}
}

// IncastResult is what an incast run measured.
type IncastResult struct {
	Config IncastConfig
	// BaseRTT is the unloaded round trip of one full packet.
	BaseRTT time.Duration
	// Window is the rate measurement window.
	Window time.Duration
	// Convergence is the time, in base RTTs, from the first data packet
	// until every sender's delivered rate (on the receiver's downlink) is
	// within 10% of its fair share for good (NaN: never). SendConvergence
	// is the same for the rates the senders put on their uplinks.
	Convergence, SendConvergence float64
	// Jain is Jain's fairness index of the senders' rates over the window
	// that starts 10 base RTTs after the first packet.
	Jain float64
	// PeakQueue is the receiver's downlink queue high-water mark (bytes).
	PeakQueue int
	// Drops counts datagrams the fabric dropped, and DropsAfterFirstRTT
	// those after the first base RTT.
	Drops, DropsAfterFirstRTT int
	// Retransmits counts the data packets the senders sent again (gap,
	// tail probe, timeout or go-back-N), all senders together.
	Retransmits uint64
	// SlowestFCT over Ideal: the last sender's completion time against
	// the wire bytes of all senders at the bottleneck plus one base RTT.
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

// Mode names the variant: our mode with or without hints, or the baseline
// on the lossless (PFC) or lossy fabric.
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

func gbps(r int64) string { return fmt.Sprintf("%g Gb/s", float64(r)/1e9) }

// queueSample is a queue's depth (bytes) from a time on.
type queueSample struct {
	at    clock.Time
	bytes int
}

// deepest is the queue's greatest depth in [from, to): the depth it had at
// from, and every depth it took after.
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

// Incast runs one N:1 incast.
func Incast(cfg IncastConfig) (IncastResult, error) {
	res := IncastResult{Config: cfg}
	n := cfg.Senders
	link := netem.LinkConfig{Rate: cfg.LinkRate, Delay: cfg.Delay,
		Queue: netem.QueueConfig{Limit: cfg.Buffer, ECNThreshold: cfg.ECNThreshold}}
	ps := sizeFor(cfg.MTU)
	fc := netem.Config{Seed: cfg.Seed, Hosts: n + 1, Planes: 1, Uplink: link, Downlink: link, MaxDatagram: ps.maxPacket()}
	if cfg.PFC {
		// Lossless: the switch pauses an uplink past 64 KiB of its bytes
		// waiting, resumes it at 32 KiB; a host's own queue is its memory.
		fc.Uplink.Queue = netem.QueueConfig{PFC: &netem.PFC{XOff: 64 << 10, XOn: 32 << 10}}
	}
	capacity := float64(cfg.LinkRate) / 8 // bytes/s on the wire
	payloadShare := ps.payloadShare()
	w, err := newWorld(fc, cfg.Seed, cfg.RealPayloads, func(h int) engine.Config {
		c := engine.Config{Paths: 8, Streams: 1, MaxPacket: ps.maxPacket(), NoProgress: time.Second,
			LineRate: float64(cfg.LinkRate) / 8}
		if cfg.Baseline {
			c.Mode = proto.ModeBaseline
		}
		if h == n {
			// The receiver shares its downlink, a little under its payload
			// rate so that queues built in the first round trip drain.
			c.InboundCapacity = 0.98 * capacity * payloadShare
			c.NoRateHints = cfg.NoRateHints
		}
		return c
	})
	if err != nil {
		return res, err
	}
	rx := n
	w.listen(rx)
	evs := make([]*events, n)
	conns := make([]*engine.Conn, n)
	for s := 0; s < n; s++ {
		evs[s] = &events{sim: w.sim}
		if conns[s], err = w.connect(s, rx, evs[s]); err != nil {
			return res, err
		}
	}
	// Base RTT: two links each way, a full packet out and an ACK back.
	ser := func(bytes int) time.Duration { return time.Duration(float64(bytes*8) / float64(cfg.LinkRate) * 1e9) }
	res.BaseRTT = 4*cfg.Delay + 2*ser(ps.wire()) + 2*ser(44+52+netem.DefaultOverhead) // a full packet out; an ACK (its headers and one record) back
	res.Window = max(res.BaseRTT, time.Duration(10*float64(n)*float64(ps.wire())/capacity*1e9))

	// Record what the receiver's downlink delivers, by sender, and drops.
	down := w.fab.Downlink(0, rx)
	type sample struct {
		at     clock.Time
		sender int
		bytes  int
	}
	var samples, sent []sample
	var first clock.Time = -1
	uplinks := map[*netem.Link]int{}
	for s := 0; s < n; s++ {
		uplinks[w.fab.Uplink(0, s)] = s
	}
	var dropTimes []clock.Time
	var queue []queueSample // the downlink's queue after each of its events
	w.fab.AddTap(func(e *netem.TapEvent) {
		if e.Link == down {
			queue = append(queue, queueSample{e.At, down.QueueBytes()})
		}
		d := e.Datagram
		if len(d.Data) < 2 || !proto.Type(d.Data[1]).IsData() {
			return
		}
		switch {
		case e.Verdict == netem.Dropped:
			dropTimes = append(dropTimes, e.At)
		case e.Verdict == netem.Sent && e.Link == down:
			if first < 0 {
				first = e.At
			}
			src := int(d.Src.Addr().As4()[2])<<8 | int(d.Src.Addr().As4()[3])
			samples = append(samples, sample{e.At, src, d.Size()})
		case e.Verdict == netem.Sent:
			if s, ok := uplinks[e.Link]; ok {
				sent = append(sent, sample{e.At, s, d.Size()})
			}
		}
	})

	dst := w.hosts[rx].region(n*cfg.Bytes, memreg.LocalWrite|memreg.RemoteWrite)
	start := w.sim.Now()
	var postErr error
	lastFirst := clock.Time(-1) // the last sender's first packet on the downlink
	for s := 0; s < n; s++ {
		src := w.hosts[s].region(cfg.Bytes, memreg.LocalWrite)
		post := func() {
			err := conns[s].Post(engine.SendWR{ID: 1, Op: engine.OpWrite, Local: engine.SGE{Region: src, Length: uint32(cfg.Bytes)},
				RKey: dst.Key(), RemoteOffset: uint64(s * cfg.Bytes)})
			if err != nil && postErr == nil {
				postErr = err
			}
		}
		if s == 0 || cfg.Stagger == 0 {
			post()
			continue
		}
		w.sim.NewTimer(post).Reset(start.Add(time.Duration(s) * cfg.Stagger))
	}
	if cfg.Stagger > 0 {
		last := n - 1
		w.fab.AddTap(func(e *netem.TapEvent) {
			d := e.Datagram
			if lastFirst < 0 && e.Verdict == netem.Sent && e.Link == down && len(d.Data) > 1 && proto.Type(d.Data[1]).IsData() &&
				int(d.Src.Addr().As4()[2])<<8|int(d.Src.Addr().As4()[3]) == last {
				lastFirst = e.At
			}
		})
	}
	done := func() bool {
		for _, e := range evs {
			if e.done == 0 && e.failed == nil {
				return false
			}
		}
		return true
	}
	if !w.run(time.Second, done) || postErr != nil {
		return res, fmt.Errorf("incast did not finish: %v", postErr)
	}
	if lastFirst >= 0 {
		first = lastFirst // measure from the join
	}
	var last clock.Time
	for s := range conns {
		res.Retransmits += conns[s].SenderStats().Retransmits
	}
	for s, e := range evs {
		if e.failed != nil {
			return res, fmt.Errorf("sender %d: %w", s, e.failed)
		}
		last = max(last, e.at)
	}
	res.SlowestFCT = last.Sub(start)
	res.Ideal = time.Duration(float64(n*cfg.Bytes)/float64(ps.mtu)*float64(ps.wire())/capacity*1e9) + res.BaseRTT
	res.FCTRatio = float64(res.SlowestFCT) / float64(res.Ideal)
	res.Goodput = float64(n*cfg.Bytes) / res.SlowestFCT.Seconds()
	res.PeakQueue = down.Stats().QueueHighWater
	for _, t := range dropTimes {
		res.Drops++
		if t > first+clock.Time(res.BaseRTT) {
			res.DropsAfterFirstRTT++
		}
	}

	// Rates per sender over sliding windows, sampled every window/8.
	win := clock.Time(res.Window)
	fair := capacity * payloadShare / float64(n)
	step := win / 8
	rates := make([]float64, n)
	// A datagram's bytes are spread over its serialization on the downlink,
	// so a window edge cuts it in proportion instead of counting it whole
	// or not at all (whole packets would make every rate jump by 10%).
	serDown := func(bytes int) clock.Time { return clock.Time(float64((bytes+66)*8) / float64(cfg.LinkRate) * 1e9) }
	rateIn := func(samples []sample, t clock.Time) []float64 { // bytes/s of each sender over (t-win, t]
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
	// The steady phase ends when the first sender's last packet crosses
	// the downlink (and its last window one window before).
	lastSeen := make([]clock.Time, n)
	for _, smp := range samples {
		lastSeen[smp.sender] = max(lastSeen[smp.sender], smp.at)
	}
	firstDone := slices.Min(lastSeen)
	horizon := clock.Time(20 * time.Microsecond) // engine.Config's default HintHorizon
	converge := func(samples []sample) float64 {
		c := math.NaN()
		// Fair shares change before the first sender's last packet: once its
		// backlog is under a horizon's worth, its demand drops and the
		// receiver gives the others more. The steady phase ends there, and
		// its last window one window before.
		for t := first + win; t <= firstDone-horizon-win; t += step {
			ok := true
			for _, r := range rateIn(samples, t) {
				if math.Abs(r-fair) > 0.1*fair {
					ok = false
				}
			}
			switch {
			case !ok:
				c = math.NaN()
			case math.IsNaN(c):
				c = float64(t-win-first) / float64(res.BaseRTT)
			}
		}
		return c
	}
	if cfg.Trace != nil {
		for t := first + win; t <= firstDone; t += step {
			cfg.Trace(float64(t-win-first)/float64(res.BaseRTT), rateIn(samples, t), fair, deepest(queue, t-win, t))
		}
	}
	res.Convergence = converge(samples)
	res.SendConvergence = converge(sent)
	res.Jain = jain(rateIn(samples, first+clock.Time(10*res.BaseRTT)+win))
	return res, nil
}

// jain is Jain's fairness index: 1 when all are equal.
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

// region registers size bytes on the host: its own, or with placeholder
// payloads a view of the world's memory.
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
