package sim

import (
	"math"
	"testing"
)

// The baseline mode is honest. Under random loss its goodput, relative to
// its own loss-free run, follows the go-back-N model 1/(1 + p W) within
// 10% from 0.1% to 5% loss. It follows the exact go-back-N efficiency
// (1 - p)/(1 - p + p W) within 10% at every loss up to 10%. W is its
// window, tuned as DefaultLoss tunes it, with RoCEv2's fixed local ACK
// timeout. At 10% the first-order model does not hold, as it leaves out
// that every resend is lost with p too. docs/cc.md explains.
func TestBaselineFollowsGoBackNModel(t *testing.T) {
	window := DefaultLoss().BaselineWindow
	run := func(p float64) TransferResult {
		cfg := DefaultTransfer()
		cfg.Bytes = 32 << 20
		cfg.Baseline, cfg.BaselineWindow, cfg.BaselineAckTimeout, cfg.Loss = true, window, DefaultLoss().BaselineAckTimeout, p
		r, err := Transfer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	base := run(0)
	t.Log(base)
	if base.Efficiency() < 0.9 {
		t.Fatalf("the loss-free baseline carries %.3f of its plane", base.Efficiency())
	}
	for _, p := range []float64{0.001, 0.01, 0.02, 0.05, 0.10} {
		r := run(p)
		got := r.Goodput / base.Goodput
		model, exact := GoBackNModel(p, window), GoBackNEfficiency(p, window)
		t.Logf("%v: %.3f of loss-free, model %.3f, go-back-N %.3f", r, got, model, exact)
		if p <= 0.05 && math.Abs(got-model) > 0.1*model {
			t.Errorf("at %.1f%% loss: %.3f of loss-free, model 1/(1+pW) %.3f", 100*p, got, model)
		}
		if math.Abs(got-exact) > 0.1*exact {
			t.Errorf("at %.1f%% loss: %.3f of loss-free, go-back-N (1-p)/(1-p+pW) %.3f", 100*p, got, exact)
		}
	}
}
