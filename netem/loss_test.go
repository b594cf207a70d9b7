package netem

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
)

// Bernoulli loss over 10^6 datagrams through the fabric stays inside a
// 4-sigma binomial bound, and every loss is counted as such.
func TestLargeRandomLossBinomial(t *testing.T) {
	if testing.Short() {
		t.Skip("10^6 datagrams: run without -short")
	}
	const n, p = 1_000_000, 0.01
	down := simpleLink(100*gbps, time.Microsecond)
	down.Impair.Loss = &RandomLoss{P: p}
	f, sim := newTestFabric(t, twoHosts(simpleLink(100*gbps, time.Microsecond), down))
	s := &countSink{}
	f.Host(1).Attach(s)
	sim.At(0, &pacer{f: f, sim: sim, src: 0, dst: 1, port: 50000, size: 64, gap: 10 * time.Nanosecond, count: n})
	sim.RunUntil(clock.Time(time.Second))
	lost := f.Downlink(0, 1).Stats().Drops[DropLoss]
	if s.n+lost != n {
		t.Fatalf("delivered %d + lost %d != sent %d", s.n, lost, n)
	}
	mean, sd := n*p, math.Sqrt(n*p*(1-p))
	if math.Abs(float64(lost)-mean) > 4*sd {
		t.Fatalf("lost %d of %d: outside %.0f +- 4 x %.1f", lost, n, mean, sd)
	}
}

type countSink struct{ n uint64 }

// Each loss model loses, over many packets, the fraction its Rate says.
func TestLossModelRates(t *testing.T) {
	const n = 400_000
	models := []LossModel{
		&RandomLoss{P: 0.05},
		&GilbertElliott{P: 0.01, R: 0.25, LossBad: 1},
		&GilbertElliott{P: 0.02, R: 0.1, LossGood: 0.001, LossBad: 0.7},
		&FourState{P13: 0.002, P31: 0.3, P32: 0.2, P23: 0.1, P14: 0.01},
	}
	for i, m := range models {
		rng := rand.New(rand.NewPCG(uint64(i), 9))
		lost := 0
		for j := 0; j < n; j++ {
			if m.Lose(rng, 0) {
				lost++
			}
		}
		got, want := float64(lost)/n, m.Rate()
		// Burst models have correlated samples, so the bound is a generous
		// 10% relative error. A wrong formula would still fall far outside.
		if math.Abs(got-want) > 0.1*want {
			t.Errorf("model %d (%T): loss rate %.5f, formula %.5f", i, m, got, want)
		}
	}
}

// Timed bursts lose BadTime / (GoodTime + BadTime) of a steady stream's
// packets, in bursts that last BadTime on average. A burst ends on time on
// a link that carries nothing. A packet after a long quiet spell is lost
// with the stationary probability, where a Gilbert-Elliott link left in its
// bad state would still lose it.
func TestTimedBursts(t *testing.T) {
	m := &TimedBursts{GoodTime: 9 * time.Microsecond, BadTime: time.Microsecond, LossBad: 1}
	rng := rand.New(rand.NewPCG(5, 6))
	const gap = 100 * time.Nanosecond
	lost, bursts, inBurst := 0, 0, false
	const n = 2_000_000
	for i := range n {
		l := m.Lose(rng, clock.Time(i)*clock.Time(gap))
		if l {
			lost++
		}
		if l && !inBurst {
			bursts++
		}
		inBurst = l
	}
	rate, burst := float64(lost)/n, time.Duration(float64(lost)/float64(bursts)*float64(gap))
	if math.Abs(rate-m.Rate()) > 0.05*m.Rate() || burst < 900*time.Nanosecond || burst > 1100*time.Nanosecond {
		t.Errorf("loss %.4f (formula %.4f), mean burst %v (BadTime %v)", rate, m.Rate(), burst, m.BadTime)
	}
	// lostAfterQuiet is the share of packets lost a quiet spell after a
	// burst began. Each trial sends packets on a fresh link until one is
	// lost, then one more.
	lostAfterQuiet := func(quiet time.Duration, seed uint64) float64 {
		const trials = 4000
		lost := 0
		for i := range trials {
			q := m.clone().(*TimedBursts)
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			at := clock.Time(0)
			for !q.Lose(r, at) { // into a burst
				at += clock.Time(gap)
			}
			if q.Lose(r, at+clock.Time(quiet)) {
				lost++
			}
		}
		return float64(lost) / trials
	}
	if got := lostAfterQuiet(time.Second, 7); math.Abs(got-0.1) > 0.02 {
		t.Errorf("after a quiet second in a burst, %.3f of packets lost: want the stationary 0.1", got)
	}
	// After a quiet microsecond the chain has not forgotten the burst. The
	// packet is lost with probability 0.1 + 0.9 exp(-(1/9 + 1/1) × 1) = 0.396.
	if got, want := lostAfterQuiet(time.Microsecond, 8), 0.1+0.9*math.Exp(-(1.0/9+1)); math.Abs(got-want) > 0.03 {
		t.Errorf("after a quiet microsecond in a burst, %.3f of packets lost: want %.3f", got, want)
	}
	if (&TimedBursts{GoodTime: time.Microsecond}).validate() == nil {
		t.Error("a zero BadTime accepted")
	}
}

// In the simple Gilbert model, with LossBad 1 and LossGood 0, loss bursts
// are geometric with mean 1/R.
func TestGilbertElliottBurstLength(t *testing.T) {
	for _, r := range []float64{0.5, 0.25, 0.1} {
		m := &GilbertElliott{P: 0.01, R: r, LossBad: 1}
		rng := rand.New(rand.NewPCG(42, uint64(r*100)))
		bursts, lostTotal, run := 0, 0, 0
		for i := 0; i < 2_000_000; i++ {
			if m.Lose(rng, 0) {
				run++
				lostTotal++
				continue
			}
			if run > 0 {
				bursts++
				run = 0
			}
		}
		got, want := float64(lostTotal)/float64(bursts), 1/r
		if math.Abs(got-want) > 0.05*want {
			t.Errorf("R=%v: mean burst %.3f, formula 1/R = %.3f", r, got, want)
		}
	}
}

// BurstLoss loses its rate of the packets, in bursts of its mean length:
// 1 / R packets in the bad state, P / (P + R) of them.
func TestBurstLossRateAndLength(t *testing.T) {
	m := BurstLoss(0.05, 4)
	if got := m.P / (m.P + m.R); math.Abs(got-0.05) > 1e-12 || m.R != 0.25 || m.LossBad != 1 || m.LossGood != 0 {
		t.Fatalf("%+v: loss %v, bursts of %v", m, got, 1/m.R)
	}
	if m := BurstLoss(0.05, 0.5); m.R != 1 {
		t.Fatalf("a mean burst under 1 packet: R %v, want 1", m.R)
	}
}
