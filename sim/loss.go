package sim

import (
	"fmt"
	"time"

	"github.com/mroce/mroce/engine"
)

// LossOptions are the loss scenario's settings.
type LossOptions struct {
	Losses []float64 // random loss rates on every downlink, or every link with EveryLink
	// EveryLink puts the loss on the uplinks too, so that a packet crosses
	// two lossy links.
	EveryLink     bool
	Bytes         int
	Planes, Paths int
	LinkRate      int64
	Links
	BaselineWindow int
	// BaselineAckTimeout is the baseline's fixed local ACK timeout. Zero
	// leaves the adaptive retransmission timeout, doubled per timeout in
	// a row.
	BaselineAckTimeout time.Duration
	Burst              bool          // loss in bursts of the same mean
	BurstLen           float64       // mean Gilbert-Elliott burst in packets
	BurstTime          time.Duration // when set, mean burst in time instead
	Seed               uint64
	Resend             engine.ResendPolicy // as TransferConfig's
	RealPayloads       bool                // as TransferConfig's
	Tracer             engine.Tracer       // as TransferConfig's, for the first run alone: mroce at the first loss rate
	Jobs               int                 // runs at once
}

// DefaultLoss is the loss scenario of docs/results.md. The baseline is
// tuned as a RoCEv2 deployment would be for this fabric. Its window of 24
// packets is the smallest that fills its plane. The go-back-N model takes
// every loss to cost a whole window, which holds only for a window no
// larger than the pipe. Its local ACK timeout of 4.096 µs x 2^2 is the
// shortest RoCEv2 offers that does not fire early here.
func DefaultLoss() LossOptions {
	return LossOptions{Losses: []float64{0, 0.001, 0.01, 0.02, 0.05, 0.1}, Bytes: 64 << 20, Planes: 4, Paths: 8,
		LinkRate: 100e9, Links: DefaultLinks(), BaselineWindow: 24, BaselineAckTimeout: BaselineAckTimeout, BurstLen: 4, Seed: 1}
}

// PathLoss is the share of packets lost on their way at loss p a link:
// p with the loss on the downlinks alone, 1 - (1 - p)^2 with EveryLink,
// as every packet crosses an uplink and a downlink.
func (o LossOptions) PathLoss(p float64) float64 {
	if o.EveryLink {
		return 1 - (1-p)*(1-p)
	}
	return p
}

// GoBackNModel is the first-order go-back-N model of goodput under random
// loss p with a window of w packets, relative to no loss. Every loss
// costs a window, which gives 1/(1 + p w).
func GoBackNModel(p float64, w int) float64 { return 1 / (1 + p*float64(w)) }

// GoBackNEfficiency is go-back-N's efficiency when every transmission,
// resends included, is lost with probability p. It is
// (1 - p)/(1 - p + p w). Below a few percent of loss it matches
// GoBackNModel, and above it falls under.
func GoBackNEfficiency(p float64, w int) float64 {
	return (1 - p) / (1 - p + p*float64(w))
}

// BaselineAckTimeout is the baseline's fixed local ACK timeout in the loss
// scenarios. It is RoCEv2's 4.096 µs x 2^2, about 3.5 base RTTs of these
// fabrics.
const BaselineAckTimeout = 16384 * time.Nanosecond

// LossResult is what the loss scenario measured, a row per loss rate.
type LossResult struct {
	Options LossOptions
	Rows    []LossRow
}

// LossRow is one loss rate's three runs. Each ratio is a run's goodput over
// the same run's at the first loss rate, which is 0 in docs/results.md.
type LossRow struct {
	Loss float64 // random loss rate on every downlink
	// Mroce runs over all planes; Baseline on one plane of the lossy
	// fabric, BaselinePFC on one plane of the PFC fabric.
	Mroce, Baseline, BaselinePFC TransferResult
	// MroceRatio, BaselineRatio and PFCRatio are the goodput ratios.
	MroceRatio, BaselineRatio, PFCRatio float64
	// Target is what MroceRatio is held to, 0.98 x (1 - PathLoss(Loss)).
	// A link loses a packet on the wire, after it took the link's time, so
	// no sender delivers more than 1 - PathLoss of what it sends. The
	// models take the same loss.
	Target float64
	// Model is GoBackNModel and GoBackN is GoBackNEfficiency, both at Loss
	// with the baseline's window.
	Model, GoBackN float64
}

// Loss measures goodput against random loss. It runs mroce over its
// planes, and the baseline with one path and go-back-N on the lossy
// fabric and on the PFC one. Each goodput is a ratio to the same run's
// without loss, and the go-back-N model stands beside the baseline.
func Loss(o LossOptions) (LossResult, error) {
	// Each loss rate has three runs. They are mroce, the lossy baseline
	// and the baseline on PFC.
	var runs []TransferConfig
	for _, p := range o.Losses {
		base := TransferConfig{Bytes: o.Bytes, Planes: o.Planes, Paths: o.Paths, LinkRate: o.LinkRate, Links: o.Links,
			Loss: p, EveryLink: o.EveryLink, Seed: o.Seed, Resend: o.Resend, Burst: o.Burst, BurstLen: o.BurstLen, BurstTime: o.BurstTime, RealPayloads: o.RealPayloads}
		bl := base
		bl.Bytes = max(o.Bytes/o.Planes, 1<<20) // one plane's share of the bytes, in the same time
		bl.Baseline, bl.BaselineWindow, bl.BaselineAckTimeout = true, o.BaselineWindow, o.BaselineAckTimeout
		bp := bl
		bp.PFC = true
		runs = append(runs, base, bl, bp)
	}
	if len(runs) > 0 {
		runs[0].Tracer = o.Tracer // the first run's alone
	}
	results, err := runEach(o.Jobs, len(runs), func(i int) (TransferResult, error) {
		r, err := Transfer(runs[i])
		if err != nil {
			err = fmt.Errorf("%s at %g: %w", [3]string{"mroce", "baseline", "baseline on PFC"}[i%3], runs[i].Loss, err)
		}
		return r, err
	})
	if err != nil {
		return LossResult{}, err
	}
	res := LossResult{Options: o}
	var m0, b0, p0 float64
	for k, p := range o.Losses {
		m, b, bp := results[3*k], results[3*k+1], results[3*k+2]
		if k == 0 {
			m0, b0, p0 = m.Goodput, b.Goodput, bp.Goodput
		}
		e := o.PathLoss(p)
		res.Rows = append(res.Rows, LossRow{Loss: p, Mroce: m, Baseline: b, BaselinePFC: bp,
			MroceRatio: m.Goodput / m0, BaselineRatio: b.Goodput / b0, PFCRatio: bp.Goodput / p0,
			Target: 0.98 * (1 - e), Model: GoBackNModel(e, o.BaselineWindow), GoBackN: GoBackNEfficiency(e, o.BaselineWindow)})
	}
	return res, nil
}
