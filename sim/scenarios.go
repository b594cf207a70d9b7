package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/mroce/mroce/report"
)

// The scenarios of mroce sim: each runs the real engine over netem in
// virtual time, deterministically for its seed, and returns its tables and
// the plot of its main figure.

// LossOptions are the loss scenario's settings.
type LossOptions struct {
	Losses         []float64 // random loss rates on every downlink
	Bytes          int
	Planes, Paths  int
	LinkRate       int64
	BaselineWindow int
	Burst          bool    // loss in bursts (Gilbert-Elliott) of the same mean
	BurstLen       float64 // mean burst, packets
	Seed           uint64
}

// DefaultLoss is the loss scenario of docs/results.md.
func DefaultLoss() LossOptions {
	return LossOptions{Losses: []float64{0, 0.001, 0.01, 0.02, 0.05, 0.1}, Bytes: 64 << 20, Planes: 4, Paths: 8,
		LinkRate: 100e9, BaselineWindow: 32, BurstLen: 4, Seed: 1}
}

// Loss measures goodput against random loss: mroce over its planes, the
// baseline (one path, go-back-N) on the lossy fabric and on the PFC one,
// each as a ratio to its own goodput without loss, and the go-back-N model
// 1/(1 + pW) beside the baseline.
func Loss(o LossOptions) ([]*report.Table, *report.Plot, error) {
	kind := "random"
	if o.Burst {
		kind = fmt.Sprintf("burst (mean %g packets)", o.BurstLen)
	}
	t := &report.Table{
		Title: fmt.Sprintf("Goodput under %s loss on every downlink: %d MiB, mroce over %d paths on %d planes of %g Gb/s; baseline on one plane, window %d",
			kind, o.Bytes>>20, o.Paths, o.Planes, float64(o.LinkRate)/1e9, o.BaselineWindow),
		Columns: []string{"loss", "mroce Gb/s", "mroce/0%", "target", "lost", "resent", "baseline lossy Gb/s", "baseline/0%", "model 1/(1+pW)", "baseline PFC Gb/s", "PFC/0%"},
	}
	pl := &report.Plot{Title: "Goodput under loss, as a share of each one's loss-free goodput", XLabel: "loss rate (%)", YLabel: "of loss-free goodput", YMin: 0, YMax: 1.05, LegendBottomLeft: true}
	series := []report.Series{{Name: "mroce"}, {Name: "baseline, lossy fabric"}, {Name: "baseline, PFC fabric"}, {Name: "go-back-N model 1/(1+pW)"}, {Name: "limit 1 - p"}}
	var m0, b0, p0 float64
	for _, p := range o.Losses {
		base := TransferConfig{Bytes: o.Bytes, Planes: o.Planes, Paths: o.Paths, LinkRate: o.LinkRate, Delay: time.Microsecond,
			Loss: p, ECNThreshold: 200 << 10, Buffer: 16 << 20, Seed: o.Seed, Burst: o.Burst, BurstLen: o.BurstLen}
		m, err := Transfer(base)
		if err != nil {
			return nil, nil, fmt.Errorf("mroce at %g: %w", p, err)
		}
		bl := base
		bl.Bytes = max(o.Bytes/4, 1<<20) // one plane: a quarter of the bytes in the same time
		bl.Baseline, bl.BaselineWindow = true, o.BaselineWindow
		b, err := Transfer(bl)
		if err != nil {
			return nil, nil, fmt.Errorf("baseline at %g: %w", p, err)
		}
		bl.PFC = true
		bp, err := Transfer(bl)
		if err != nil {
			return nil, nil, fmt.Errorf("baseline on PFC at %g: %w", p, err)
		}
		if p == o.Losses[0] {
			m0, b0, p0 = m.Goodput, b.Goodput, bp.Goodput
		}
		model := 1 / (1 + p*float64(o.BaselineWindow))
		t.Add(p, m.Goodput*8/1e9, m.Goodput/m0, 0.98*(1-p), m.Lost, m.Retransmits, b.Goodput*8/1e9, b.Goodput/b0, model,
			bp.Goodput*8/1e9, bp.Goodput/p0)
		for i, y := range []float64{m.Goodput / m0, b.Goodput / b0, bp.Goodput / p0, model, 1 - p} {
			series[i].X = append(series[i].X, 100*p)
			series[i].Y = append(series[i].Y, y)
		}
	}
	if o.Losses[0] != 0 {
		t.Notes = append(t.Notes, "Ratios are to the first loss rate's goodput, which is not 0.")
	}
	t.Notes = append(t.Notes, "The target for mroce is 0.98 x (1 - p) of its loss-free goodput; the baseline is held to its model within 10%.")
	pl.Series = series
	return []*report.Table{t}, pl, nil
}

// IncastOptions are the incast scenario's settings.
type IncastOptions struct {
	Senders []int
	Rates   []int64
	Bytes   int
	Seed    uint64
}

// DefaultIncastScenario is the incast scenario of docs/results.md.
func DefaultIncastScenario() IncastOptions {
	return IncastOptions{Senders: []int{8, 64}, Rates: []int64{100e9, 400e9}, Bytes: 2 << 20, Seed: 1}
}

// IncastScenario runs N:1 incasts side by side: mroce, mroce without the
// receiver's hints, the baseline on the PFC fabric and on the lossy one.
// The plot follows the first mroce run at the largest N: the slowest,
// mean and fastest sender's delivered rate over fair share, window by
// window.
func IncastScenario(o IncastOptions) ([]*report.Table, *report.Plot, error) {
	t := &report.Table{
		Title:   fmt.Sprintf("N:1 incast, %d MiB from each sender, 4 KiB packets, DCTCP marking at 200 KiB", o.Bytes>>20),
		Columns: []string{"N", "Gb/s", "variant", "converged (base RTTs)", "Jain after 10 RTTs", "peak queue KiB", "drops", "after 1st RTT", "slowest FCT/ideal"},
		Notes:   []string{"Converged: from the first data packet until every sender's delivered rate stays within 10% of its fair share (targets: 2 base RTTs at N = 8, 4 at N = 64)."},
	}
	nMax := 0
	for _, n := range o.Senders {
		nMax = max(nMax, n)
	}
	pl := &report.Plot{Title: fmt.Sprintf("Incast %d:1 at %g Gb/s (mroce): delivered rate over fair share", nMax, float64(o.Rates[0])/1e9),
		XLabel: "base RTTs from the first data packet (window start)", YLabel: "rate / fair share"}
	series := []report.Series{{Name: "slowest sender"}, {Name: "mean"}, {Name: "fastest sender"}}
	variants := []IncastConfig{{}, {NoRateHints: true}, {Baseline: true, PFC: true}, {Baseline: true}}
	for _, n := range o.Senders {
		for ri, rate := range o.Rates {
			for vi, v := range variants {
				cfg := DefaultIncast(n, rate)
				cfg.Bytes, cfg.Seed = o.Bytes, o.Seed
				cfg.NoRateHints, cfg.Baseline, cfg.PFC = v.NoRateHints, v.Baseline, v.PFC
				if n == nMax && ri == 0 && vi == 0 {
					cfg.Trace = func(start float64, rates []float64, fair float64) {
						lo, hi, sum := math.Inf(1), 0.0, 0.0
						for _, r := range rates {
							lo, hi, sum = math.Min(lo, r), math.Max(hi, r), sum+r
						}
						for i, y := range []float64{lo / fair, sum / float64(len(rates)) / fair, hi / fair} {
							series[i].X = append(series[i].X, start)
							series[i].Y = append(series[i].Y, y)
						}
					}
				}
				r, err := Incast(cfg)
				if err != nil {
					return nil, nil, fmt.Errorf("incast %d at %g Gb/s, %s: %w", n, float64(rate)/1e9, cfg.Mode(), err)
				}
				t.Add(n, float64(rate)/1e9, cfg.Mode(), r.Convergence, r.Jain, r.PeakQueue>>10, r.Drops, r.DropsAfterFirstRTT, r.FCTRatio)
			}
		}
	}
	pl.Series = series
	return []*report.Table{t}, pl, nil
}
