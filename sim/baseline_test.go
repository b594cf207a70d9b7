package sim

import (
	"math"
	"testing"
)

// The baseline mode is honest: under random loss its goodput, relative to
// its own loss-free run, follows the go-back-N model 1/(1 + p W) within 10%,
// W its configured window, up to 5% loss. At 10% (p W = 3.2) the
// first-order model no longer holds: one SEQ_ERR NACK in ten is lost too and
// the sender waits out its ACK timeout, as a RoCEv2 requester does; the
// figure is reported, not held to the model.
func TestBaselineFollowsGoBackNModel(t *testing.T) {
	const window = 32
	run := func(p float64) TransferResult {
		cfg := DefaultTransfer()
		cfg.Bytes = 16 << 20
		cfg.Baseline, cfg.BaselineWindow, cfg.Loss = true, window, p
		r, err := Transfer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	base := run(0)
	t.Log(base)
	if base.Efficiency() < 0.8 {
		t.Fatalf("the loss-free baseline carries %.3f of its plane", base.Efficiency())
	}
	for _, p := range []float64{0.001, 0.01, 0.05, 0.10} {
		r := run(p)
		got := r.Goodput / base.Goodput
		model := 1 / (1 + p*window)
		t.Logf("%v: %.3f of loss-free, model %.3f", r, got, model)
		if p <= 0.05 && math.Abs(got-model) > 0.1*model {
			t.Errorf("at %.1f%% loss: %.3f of loss-free, model %.3f", 100*p, got, model)
		}
	}
}
