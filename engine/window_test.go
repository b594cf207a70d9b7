package engine

import (
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

// TestWindowOutlastsRepeatedLoss checks that the default DSN window lets a
// connection at its host's line, four planes of 100 Gb/s, keep sending new
// data while one early DSN is lost 16 times in a row, its copies included:
// the window never fills behind it (spec section 6.5). Each loss takes a
// couple of round trips to find, so the DSN holds the window's head while
// the connection sends more than 2,048 DSNs after it, and a window of
// 2,048 fills.
func TestWindowOutlastsRepeatedLoss(t *testing.T) {
	ahead, window, done := runHeldHead(t, 0)
	if window != defaultDSNWindow {
		t.Fatalf("the window is %d DSNs, want the default %d", window, defaultDSNWindow)
	}
	if ahead >= window {
		t.Fatalf("the window of %d DSNs filled behind the lost DSN (done at %v)", window, done)
	}
	if ahead <= 2048 {
		t.Fatalf("at most %d DSNs went ahead of the lost one: the loss held nothing back", ahead)
	}
	t.Logf("at most %d DSNs ahead of the head, in a window of %d; done at %v", ahead, window, done)
	small, smallWindow, smallDone := runHeldHead(t, 2048)
	if small < smallWindow {
		t.Fatalf("a window of %d did not fill: %d DSNs ahead at most", smallWindow, small)
	}
	if smallDone <= done {
		t.Fatalf("with a window of %d the WRITE ended at %v, no later than %v", smallWindow, smallDone, done)
	}
	t.Logf("a window of %d filled, and the WRITE ended at %v", smallWindow, smallDone)
}

// runHeldHead WRITEs 32 MiB over 16 paths of four planes, dropping the
// 65th packet's first 16 transmissions, with the receiver offering
// window DSNs (0: the default). It returns the most DSNs the sender had
// sent from its window's head, its window, and when the WRITE completed.
func runHeldHead(t *testing.T, window int) (ahead, sendWindow uint32, done clock.Time) {
	t.Helper()
	const size = 32 << 20
	const losses = 16
	n := newNet(t, fourPlanes(), Config{Paths: 16, DSNWindow: window})
	pr := n.connect(0, 1)
	s := &pr.a.snd
	target := uint32(64 * s.payloadMax(proto.TypeWrite))
	drop := &dropPort{Port: n.fab.Host(0), limit: losses, match: func(p *proto.Packet) bool {
		return p.Type() == proto.TypeWrite && p.Write().MsgOffset() == target
	}}
	n.hosts[0].ep.port = drop
	src := pr.ha.region(t, size, 5, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	if err := pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()}); err != nil {
		t.Fatal(err)
	}
	if !n.run(time.Second, func() bool {
		ahead = max(ahead, s.nextDSN-s.una)
		return len(pr.ra.done) == 1
	}) || pr.ra.done[0].Status != StatusOK {
		t.Fatalf("the WRITE did not complete: %+v", pr.ra.done)
	}
	if drop.dropped != losses {
		t.Fatalf("the DSN was lost %d times, want %d", drop.dropped, losses)
	}
	if digest(src.Bytes()) != digest(dst.Bytes()) {
		t.Fatal("the WRITE's bytes differ")
	}
	return ahead, s.window, n.sim.Now()
}
