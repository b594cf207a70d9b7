package pathmgr

import (
	"math"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
)

// transitions records what a path tells its listener.
type transitions struct {
	p   *Path
	log []string
}

func (l *transitions) PathChanged(from State, repath bool) {
	s := from.String() + ">" + l.p.State().String()
	if repath {
		s += " repath"
	}
	l.log = append(l.log, s)
}

func newPath(t *testing.T, ports *Ports) (*Path, *transitions) {
	t.Helper()
	p := new(Path)
	l := &transitions{p: p}
	p.Init(1, 0, ports, 1000, l)
	return p, l
}

// The states of spec section 6.4 follow the events that move them, and the
// listener hears of each transition.
func TestPathStateMachine(t *testing.T) {
	p, l := newPath(t, &Ports{Pool: []uint16{7000, 7001}, Stride: 2, MPL: time.Millisecond})
	if p.State() != Good || !p.Ready(0, false) {
		t.Fatalf("a new path is %v, want GOOD and ready", p.State())
	}
	p.Marked(10, 5)
	if p.State() != Skip || p.Ready(12, false) || !p.Ready(12, true) {
		t.Fatalf("after a CE mark: %v; ready for new data %v, as a last resort %v", p.State(), p.Ready(12, false), p.Ready(12, true))
	}
	if !p.Ready(15, false) || p.State() != Good {
		t.Fatalf("a round trip without a mark later: %v, want GOOD", p.State())
	}
	p.Marked(20, 5)
	p.Clean()
	if p.State() != Good {
		t.Fatalf("after a clean report: %v, want GOOD", p.State())
	}
	p.TimedOut()
	if p.State() != AssumedBad || p.Ready(100, true) || p.InUse() {
		t.Fatalf("after a timeout: %v, ready %v, in use %v", p.State(), p.Ready(100, true), p.InUse())
	}
	p.Marked(30, 5) // a mark does not bring back a path that timed out
	if p.State() != AssumedBad {
		t.Fatalf("a CE mark moved an ASSUMED_BAD path to %v", p.State())
	}
	if !p.Delivered() || p.State() != Good || p.Delivered() {
		t.Fatalf("an answer to an ASSUMED_BAD path: %v, want GOOD once", p.State())
	}
	p.PlaneDown()
	p.Clean()
	if p.State() != Down || p.InUse() {
		t.Fatalf("after its plane went down: %v", p.State())
	}
	p.PlaneUp(true)
	if p.State() != AssumedBad {
		t.Fatalf("a plane back, probing: %v, want ASSUMED_BAD", p.State())
	}
	p.PlaneDown()
	p.PlaneUp(false)
	if p.State() != Good {
		t.Fatalf("a plane back, without probing: %v, want GOOD", p.State())
	}
	want := []string{"GOOD>SKIP", "SKIP>GOOD", "GOOD>SKIP", "SKIP>GOOD", "GOOD>ASSUMED_BAD", "ASSUMED_BAD>GOOD",
		"GOOD>DOWN", "DOWN>ASSUMED_BAD", "ASSUMED_BAD>DOWN", "DOWN>GOOD"}
	if len(l.log) != len(want) {
		t.Fatalf("listener heard %q, want %q", l.log, want)
	}
	for i := range want {
		if l.log[i] != want[i] {
			t.Fatalf("listener heard %q, want %q", l.log, want)
		}
	}
}

// A repath moves the path by the stride in the pool, advances its epoch
// modulo 4 and starts the new epoch at the next PSN, by spec section 6.3.
func TestPathRepath(t *testing.T) {
	pool := []uint16{7000, 7001, 7002, 7003, 7004, 7005}
	const mpl = time.Millisecond
	p, l := newPath(t, &Ports{Pool: pool, Stride: 2, MPL: mpl})
	if p.Port() != 7001 || p.Epoch() != 0 || p.EpochStart(0) != 1000 {
		t.Fatalf("path 1 starts on port %d, epoch %d from PSN %d", p.Port(), p.Epoch(), p.EpochStart(0))
	}
	now := clock.Time(0)
	for i, wantPort := range []uint16{7003, 7005, 7001, 7003, 7005} {
		psn := uint32(2000 + i)
		if !p.Repath(now, psn) {
			t.Fatalf("repath %d at %v refused", i, now)
		}
		e := uint8(i+1) & 3
		if p.Port() != wantPort || p.Epoch() != e || p.EpochStart(e) != psn {
			t.Fatalf("repath %d: port %d epoch %d from PSN %d; want %d, %d, %d", i, p.Port(), p.Epoch(), p.EpochStart(e), wantPort, e, psn)
		}
		now = now.Add(2 * mpl << maxMoveBackoff) // long enough to start afresh
	}
	if p.Counters.Repaths != 5 || l.log[len(l.log)-1] != "GOOD>GOOD repath" {
		t.Fatalf("%d repaths counted, last heard %q", p.Counters.Repaths, l.log)
	}
	// A pool that is a multiple of the stride would bring a path back to
	// its own port, so it steps one further.
	q, _ := newPath(t, &Ports{Pool: []uint16{7000, 7001}, Stride: 2})
	q.Repath(0, 0)
	if q.Port() != 7000 {
		t.Fatalf("repath in a pool of the stride's size: port %d, want 7000", q.Port())
	}
}

// A path moves at most once per MPL, and each move in a row doubles the
// wait up to 2^maxMoveBackoff MPL, so a path that no port cures does not
// move in a loop. A path that stayed put for twice the longest wait may
// move after one MPL again.
func TestPathRepathBacksOff(t *testing.T) {
	const mpl = time.Millisecond
	p, _ := newPath(t, &Ports{Pool: []uint16{7000, 7001, 7002, 7003}, Stride: 1, MPL: mpl})
	now := clock.Time(0)
	if !p.Repath(now, 1) {
		t.Fatal("the first repath was refused")
	}
	for i, wait := range []time.Duration{mpl, 2 * mpl, 4 * mpl, 8 * mpl, 16 * mpl, 32 * mpl, 32 * mpl} {
		if p.Repath(now.Add(wait-1), 1) {
			t.Fatalf("move %d came %v after the one before, want a wait of %v", i+2, wait-1, wait)
		}
		if now = now.Add(wait); !p.Repath(now, 1) {
			t.Fatalf("move %d refused after a wait of %v", i+2, wait)
		}
	}
	now = now.Add(2 * mpl << maxMoveBackoff)
	if !p.Repath(now, 1) || p.Repath(now.Add(mpl-1), 1) || !p.Repath(now.Add(mpl), 1) {
		t.Fatal("a path that stayed put did not start afresh at one MPL")
	}
}

// A reply to one of the path's probeMemory newest probes of its current
// epoch answers it. A reply from before a repath does not.
func TestPathProbeAnswers(t *testing.T) {
	p, _ := newPath(t, &Ports{Pool: []uint16{7000, 7001}, Stride: 1})
	if p.ProbeAnswers(0, 0) || p.ProbeAnswers(1, 0) {
		t.Fatal("a reply answered a path that sent no probe")
	}
	first := p.NewProbe()
	var id uint32
	for range probeMemory {
		id = p.NewProbe()
	}
	if p.ProbeAnswers(first, 0) || !p.ProbeAnswers(first+1, 0) || !p.ProbeAnswers(id, 0) || p.ProbeAnswers(id+1, 0) || p.ProbeAnswers(id, 1) {
		t.Fatal("a probe reply was matched wrongly before the repath")
	}
	p.Repath(0, 5)
	if p.ProbeAnswers(id, 0) || p.ProbeAnswers(id, 1) {
		t.Fatal("a reply to a probe of the old epoch answered after a repath")
	}
	next := p.NewProbe()
	if !p.ProbeAnswers(next, 1) || p.ProbeAnswers(next, 0) {
		t.Fatal("a reply to the new epoch's probe was matched wrongly")
	}
}

// A path's loss is measured over rounds of lossRound packets and stands out
// only above lossFloor and factor times the others'.
func TestPathLoss(t *testing.T) {
	p, _ := newPath(t, &Ports{Pool: []uint16{7000}, Stride: 1})
	if p.CountLoss(50, 10) || p.LossAverage() != -1 {
		t.Fatalf("a round ended early: average %v", p.LossAverage())
	}
	if !p.CountLoss(14, 6) || p.LossAverage() != 16.0/80 {
		t.Fatalf("after one round: average %v, want 0.2", p.LossAverage())
	}
	p.CountLoss(64, 0)
	if got := p.LossAverage(); math.Abs(got-0.15) > 1e-12 {
		t.Fatalf("after a clean round: average %v, want 0.15", got)
	}
	if !p.LossOutlier(0.01, 3) || p.LossOutlier(0.05, 3) {
		t.Fatal("an average of 0.15 against 0.01 and 0.05 at factor 3")
	}
	p.RestartLoss(0.015)
	if p.LossOutlier(0, 3) {
		t.Fatal("a loss below the floor stood out")
	}
}
