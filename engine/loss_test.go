package engine

import (
	"math"
	"testing"
)

// The connection's random loss explains a silence only as long as that
// loss makes it likely, and only once enough verdicts came.
func TestRandomLossExplainsShortSilences(t *testing.T) {
	var l randomLoss
	l.add(8, 2, 2)
	if l.explains(1) {
		t.Fatal("10 verdicts explained a silence: want at least 16 first")
	}
	for range 20 {
		l.add(8, 2, 2) // 20% lost, one at a time
	}
	if l.rate < 0.19 || l.rate > 0.21 {
		t.Fatalf("rate %.3f after 20%% lost, want 0.2", l.rate)
	}
	// A transmission or its answer is lost 1 - 0.8^2 = 36% of the time:
	// 4 in a row 1.7% of the time, 5 in a row 0.6%.
	explainsUpTo(t, "at 20%", &l, 4)
	none := fed(10, 10, 0, 0)
	if none.explains(1) {
		t.Error("a connection that lost nothing explained a silence")
	}
}

// Losses in runs explain a longer silence: a run goes on as often as its
// mean length says, and random losses at a high rate, whose runs are short,
// explain no more than before.
func TestLossInRunsExplainsLongerSilences(t *testing.T) {
	bursts := fed(20, 36, 4, 1) // 10% lost, in runs of 4
	if bursts.run < 3.9 || bursts.run > 4.1 {
		t.Fatalf("mean run %.2f after runs of 4, want 4", bursts.run)
	}
	// A transmission or its answer is lost 19% of the time, and a run goes
	// on 75% of the time: 11 in a row 1.1%, 12 in a row 0.8%. One at a
	// time, 2 in a row are 3.6%, and 3 0.7%.
	explainsUpTo(t, "runs of 4 at 10%", &bursts, 11)
	few := fed(3, 36, 4, 1)
	if few.explains(3) {
		t.Error("3 runs of 4 explained 3 silent transmissions: want 16 runs first")
	}
	single := fed(20, 36, 4, 4)
	explainsUpTo(t, "single losses at 10%", &single, 2)
	heavy := fed(20, 6, 4, 3) // 40% lost, in runs of 1.33: shorter than the silence rate's
	plain := 1 - 0.6*0.6
	for n := 1; n <= 8; n++ {
		if want := math.Pow(plain, float64(n)) >= lossExplains; heavy.explains(n) != want {
			t.Errorf("40%% lost in short runs: %d silent transmissions explained %v, want %v as independent losses", n, heavy.explains(n), want)
		}
	}
}

// A transmission at the tail gets as many copies as make losing them all
// no likelier than tailMiss at the connection's loss, at least one and at
// most maxTailCopies, and one before the rate means anything.
func TestTailCopiesFollowTheRate(t *testing.T) {
	for _, c := range []struct {
		lost, of int // verdicts, given 20 times
		want     int
	}{
		{0, 10, 1},
		{1, 10, 1}, // 10%: a copy and the original both lost 1% of the time
		{2, 10, 2}, // 20%: 4% with one copy, 0.8% with two
		{3, 10, 3}, // 30%: 2.7% with two copies
		{5, 10, 3}, // 50%: the most, though all four are lost 6% of the time
	} {
		l := fed(20, c.of-c.lost, c.lost, c.lost)
		if got := l.tailCopies(); got != c.want {
			t.Errorf("%d of %d lost: %d copies, want %d", c.lost, c.of, got, c.want)
		}
	}
	early := fed(1, 5, 5, 5)
	if got := early.tailCopies(); got != 1 {
		t.Errorf("after 10 verdicts, half of them lost: %d copies, want 1", got)
	}
}

// fed returns a randomLoss given the same record's verdicts times times:
// acked received, lost lost in runs runs.
func fed(times, acked, lost, runs int) randomLoss {
	var l randomLoss
	for range times {
		l.add(acked, lost, runs)
	}
	return l
}

// explainsUpTo checks that l explains a silence of n transmissions in a
// row and not one of n + 1.
func explainsUpTo(t *testing.T, what string, l *randomLoss, n int) {
	t.Helper()
	if !l.explains(n) || l.explains(n+1) {
		t.Errorf("%s: %d silent transmissions explained %v, %d %v; want true, false", what, n, l.explains(n), n+1, l.explains(n+1))
	}
}
