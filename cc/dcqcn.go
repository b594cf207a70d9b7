package cc

import (
	"math"
	"time"
)

// DCQCNParams are DCQCN's parameters, from Zhu et al., "Congestion Control
// for Large-Scale RDMA Deployments", SIGCOMM 2015. DefaultDCQCN gives the
// published defaults.
type DCQCNParams struct {
	LineRate float64       // the starting and highest rate, in bytes/s
	MinRate  float64       // the floor, in bytes/s
	G        float64       // gain of alpha's moving average
	AlphaT   time.Duration // alpha decays once per AlphaT without a CNP
	RateT    time.Duration // a rate-increase event per RateT without a CNP
	ByteB    float64       // and one per ByteB bytes sent
	F        int           // fast-recovery stages before additive increase
	RAI      float64       // additive increase, in bytes/s
	RHAI     float64       // hyper increase, in bytes/s
}

// DefaultDCQCN returns the published constants for a line rate in bytes/s.
// They are g = 1/256, alpha and rate timers of 55 µs, a byte counter of
// 10 MB, F = 5, R_AI = 40 Mb/s, R_HAI = 400 Mb/s and a floor of 10 Mb/s.
func DefaultDCQCN(lineRate float64) DCQCNParams {
	return DCQCNParams{LineRate: lineRate, MinRate: 10e6 / 8, G: 1.0 / 256,
		AlphaT: 55 * time.Microsecond, RateT: 55 * time.Microsecond, ByteB: 10e6,
		F: 5, RAI: 40e6 / 8, RHAI: 400e6 / 8}
}

// DCQCN is the reaction point's rate controller. A CNP cuts the current
// rate by alpha/2 and remembers the old rate as the target. Without CNPs,
// timer and byte-counter events raise the rate back, first in fast
// recovery halfway to the target, then by additive and then hyper
// increase. Timers are applied lazily from the times given, so the
// controller needs no clock of its own.
type DCQCN struct {
	p             DCQCNParams
	rc, rt        float64 // current and target rate, in bytes/s
	alpha         float64
	lastAlpha     int64 // ns of the last alpha decay or CNP
	lastRateT     int64 // ns of the last timer event or CNP
	bytes         float64
	timerN, byteN int // increase events since the last CNP, by source
	cnps          uint64
}

// NewDCQCN starts at line rate with alpha 1. Parameters that would make no
// sense, such as zero or negative periods, byte counts or rates, take the
// defaults.
func NewDCQCN(p DCQCNParams, now int64) *DCQCN {
	def := DefaultDCQCN(p.LineRate)
	if !(p.LineRate > 0) {
		def = DefaultDCQCN(12.5e9)
		p.LineRate = def.LineRate
	}
	if p.AlphaT <= 0 {
		p.AlphaT = def.AlphaT
	}
	if p.RateT <= 0 {
		p.RateT = def.RateT
	}
	if p.ByteB <= 0 {
		p.ByteB = def.ByteB
	}
	if !(p.G > 0 && p.G < 1) {
		p.G = def.G
	}
	if !(p.MinRate > 0) {
		p.MinRate = def.MinRate
	}
	return &DCQCN{p: p, rc: p.LineRate, rt: p.LineRate, alpha: 1, lastAlpha: now, lastRateT: now}
}

// Rate is the current rate at now, after any timer events due.
func (d *DCQCN) Rate(now int64) float64 {
	d.advance(now)
	return d.rc
}

// CNPs counts the congestion notifications received.
func (d *DCQCN) CNPs() uint64 { return d.cnps }

// OnCNP is a congestion notification at now, which cuts the rate.
func (d *DCQCN) OnCNP(now int64) {
	d.advance(now)
	d.cnps++
	d.rt = d.rc
	d.rc = max(d.p.MinRate, d.rc*(1-d.alpha/2))
	d.alpha = (1-d.p.G)*d.alpha + d.p.G
	d.lastAlpha, d.lastRateT = now, now
	d.bytes, d.timerN, d.byteN = 0, 0, 0
}

// OnSent counts bytes sent, for the byte counter.
func (d *DCQCN) OnSent(now int64, n int) {
	d.advance(now)
	d.bytes += float64(n)
	for d.bytes >= d.p.ByteB {
		d.bytes -= d.p.ByteB
		d.byteN++
		d.increase()
	}
}

func (d *DCQCN) advance(now int64) {
	if k := (now - d.lastAlpha) / int64(d.p.AlphaT); k > 0 {
		d.lastAlpha += k * int64(d.p.AlphaT)
		d.alpha *= math.Pow(1-d.p.G, float64(k))
	}
	for now-d.lastRateT >= int64(d.p.RateT) {
		if d.rc >= d.p.LineRate && d.rt >= d.p.LineRate {
			// At line rate nothing more can change, so the idle periods are skipped.
			d.lastRateT += (now - d.lastRateT) / int64(d.p.RateT) * int64(d.p.RateT)
			break
		}
		d.lastRateT += int64(d.p.RateT)
		d.timerN++
		d.increase()
	}
}

// increase is one rate-increase event.
func (d *DCQCN) increase() {
	switch {
	case d.timerN > d.p.F && d.byteN > d.p.F: // hyper increase
		d.rt = min(d.p.LineRate, d.rt+d.p.RHAI)
	case d.timerN > d.p.F || d.byteN > d.p.F: // additive increase
		d.rt = min(d.p.LineRate, d.rt+d.p.RAI)
	}
	d.rc = min(d.p.LineRate, (d.rt+d.rc)/2) // fast recovery, halfway to the target
}
