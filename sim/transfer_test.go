package sim

import (
	"testing"
)

// One connection over 4 planes of equal rate reaches at least 90% of their
// aggregate, and keeps at least 0.98 x (1 - p) of its loss-free goodput at
// random loss p up to 10%, with ACKs lost as much as data.
func TestTransferOverPlanesAndLoss(t *testing.T) {
	base, err := Transfer(DefaultTransfer())
	if err != nil {
		t.Fatal(err)
	}
	t.Log(base)
	if base.Efficiency() < 0.9 {
		t.Fatalf("one connection over 4 planes: %.3f of the aggregate", base.Efficiency())
	}
	for _, p := range []float64{0.001, 0.01, 0.05, 0.10} {
		if testing.Short() && p > 0.01 {
			continue
		}
		cfg := DefaultTransfer()
		cfg.Loss = p
		r, err := Transfer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ratio := r.Goodput / base.Goodput
		t.Logf("%v; %.3f of loss-free (limit %.3f)", r, ratio, 1-p)
		if ratio < 0.98*(1-p) {
			t.Errorf("at %.1f%% loss: %.3f of loss-free goodput, want >= %.3f", 100*p, ratio, 0.98*(1-p))
		}
	}
}
