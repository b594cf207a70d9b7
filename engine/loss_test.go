package engine

import "testing"

// The connection's random loss explains a silence only as long as that
// loss makes it likely, and only once enough verdicts came.
func TestRandomLossExplainsShortSilences(t *testing.T) {
	var l randomLoss
	l.add(8, 2)
	if l.explains(1) {
		t.Fatal("10 verdicts explained a silence: want at least 16 first")
	}
	for range 20 {
		l.add(8, 2) // 20% lost
	}
	if l.rate < 0.19 || l.rate > 0.21 {
		t.Fatalf("rate %.3f after 20%% lost, want 0.2", l.rate)
	}
	// A transmission or its answer is lost 1 - 0.8^2 = 36% of the time:
	// 4 in a row 1.7% of the time, 5 in a row 0.6%.
	if !l.explains(4) || l.explains(5) {
		t.Errorf("at 20%%: 4 silent transmissions explained %v, 5 %v; want true, false", l.explains(4), l.explains(5))
	}
	var none randomLoss
	for range 10 {
		none.add(10, 0)
	}
	if none.explains(1) {
		t.Error("a connection that lost nothing explained a silence")
	}
}
