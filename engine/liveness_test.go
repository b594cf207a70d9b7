package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/proto"
)

// kill makes host h stop as a crashed process does: it sends nothing more
// and hears nothing.
func (n *testNet) kill(h int) {
	n.hosts[h].ep.port = &portFilter{Port: n.fab.Host(h), drop: func(*link.Datagram) bool { return true }}
	n.fab.Host(h).Attach(nil)
}

// keepAlives counts the keep-alive PROBEs host h sends from now on.
func (n *testNet) keepAlives(h int) *int {
	count := new(int)
	n.hosts[h].ep.port = &portFilter{Port: n.fab.Host(h), drop: func(d *link.Datagram) bool {
		var pkt proto.Packet
		if pkt.Decode(d.Data) == nil && pkt.Type() == proto.TypeProbe && pkt.Probe().ProbeID() == 0 {
			*count++
		}
		return false
	}}
	return count
}

const liveness = 10 * time.Millisecond

// A connection with nothing to do stays up as long as its peer answers
// its keep-alives, and the end that only receives gets no path state for
// them (spec section 8.6).
func TestIdleConnectionStaysUp(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 4, NoProgress: liveness})
	pr := n.connect(0, 1)
	probes := n.keepAlives(0)
	n.run(20*liveness, func() bool { return false })
	if pr.a.State() != Established || pr.b.State() != Established {
		t.Fatalf("idle connection ended: %v (%v), %v (%v)", pr.a.State(), pr.a.Err(), pr.b.State(), pr.b.Err())
	}
	// Four planes, a keep-alive on each about every KeepAlive of quiet.
	if *probes < 4*20 {
		t.Fatalf("%d keep-alives in 20 NoProgress intervals, want at least 80", *probes)
	}
	if pr.a.snd.paths != nil || pr.b.snd.paths != nil {
		t.Fatal("keep-alives made a sender equip its paths")
	}
}

// A peer that dies silently is declared dead NoProgress after its last
// packet, by a connection that has nothing outstanding and by one that
// only receives, each with ErrTimeout and a CLOSE TIMEOUT.
func TestSilentPeerIsDeclaredDead(t *testing.T) {
	skipUnderRace(t)
	for _, busy := range []bool{false, true} {
		n := newNet(t, fourPlanes(), Config{Paths: 4, NoProgress: liveness})
		pr := n.connect(0, 1)
		if busy {
			const size = 256 << 20 // longer than the test: the sender dies mid-transfer
			src := pr.ha.region(t, size, 1, memreg.LocalWrite)
			dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
			pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
			n.run(time.Millisecond, func() bool { return false })
			if pr.b.ReceiverStats().Packets == 0 {
				t.Fatal("nothing arrived before the sender died")
			}
		}
		var closes []proto.CloseReason
		n.hosts[1].ep.port = &portFilter{Port: n.fab.Host(1), drop: func(d *link.Datagram) bool {
			var pkt proto.Packet
			if pkt.Decode(d.Data) == nil && pkt.Type() == proto.TypeClose {
				closes = append(closes, pkt.Close().Reason())
			}
			return false
		}}
		diedAt := n.sim.Now()
		n.kill(0)
		if !n.run(3*liveness, func() bool { return pr.b.State() == Closed }) {
			t.Fatalf("busy %v: the survivor still %v %v after its peer died", busy, pr.b.State(), liveness*3)
		}
		after := n.sim.Now().Sub(diedAt)
		if !errors.Is(pr.b.Err(), ErrTimeout) || after > liveness+time.Millisecond {
			t.Fatalf("busy %v: ended %v after its peer died with %v; want ErrTimeout within NoProgress", busy, after, pr.b.Err())
		}
		if len(closes) == 0 || closes[0] != proto.CloseTimeout {
			t.Fatalf("busy %v: CLOSEs sent %v, want TIMEOUT", busy, closes)
		}
	}
}

// An application's abort reaches the peer in one CLOSE APPLICATION with
// its code, even when the first CLOSE is lost, and both sides' outstanding
// work completes with the code (spec section 8.5).
func TestAbortTellsThePeerItsCode(t *testing.T) {
	for _, lose := range []int{0, 1} {
		drop := &dropPort{match: func(p *proto.Packet) bool { return p.Type() == proto.TypeClose }, limit: lose}
		n := newNetWithDrop(t, twoHostFabric(1), Config{}, drop)
		pr := n.connect(0, 1)
		if err := pr.b.PostRecv(RecvWR{ID: 7, Stream: 1}); err != nil {
			t.Fatal(err)
		}
		const size = 64 << 20 // longer than the test: the abort comes mid-transfer
		src := pr.ha.region(t, size, 1, memreg.LocalWrite)
		dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
		pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
		n.run(100*time.Microsecond, func() bool { return false })
		at := n.sim.Now()
		pr.a.Abort(42)
		if !n.run(time.Second, func() bool { return pr.b.State() == Closed }) {
			t.Fatalf("lose %d: the peer never learned of the abort", lose)
		}
		// One round trip, or the CLOSE's 100 ms resend when one is lost.
		if took := n.sim.Now().Sub(at); took > time.Duration(lose)*100*time.Millisecond+time.Millisecond {
			t.Fatalf("lose %d: the peer closed %v after the abort", lose, took)
		}
		var local, remote *AbortError
		if !errors.As(pr.a.Err(), &local) || local.Code != 42 || local.Remote {
			t.Fatalf("lose %d: aborting side ended with %v", lose, pr.a.Err())
		}
		if !errors.As(pr.b.Err(), &remote) || remote.Code != 42 || !remote.Remote {
			t.Fatalf("lose %d: peer ended with %v", lose, pr.b.Err())
		}
		if len(pr.ra.done) != 1 || pr.ra.done[0].Status != StatusFlushed || !errors.As(pr.ra.done[0].Err, &local) {
			t.Fatalf("lose %d: the aborted WRITE completed %+v", lose, pr.ra.done)
		}
		if len(pr.rb.done) != 1 || pr.rb.done[0].ID != 7 || !errors.As(pr.rb.done[0].Err, &remote) {
			t.Fatalf("lose %d: the peer's posted receive completed %+v", lose, pr.rb.done)
		}
	}
}

// A post to a connection that has ended fails with ErrClosed, and its
// message and chain name why the connection ended.
func TestPostToAnEndedConnectionSaysWhy(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{NoProgress: liveness})
	pr := n.connect(0, 1)
	n.kill(1)
	if !n.run(3*liveness, func() bool { return pr.a.State() == Closed }) {
		t.Fatal("the connection did not end")
	}
	for _, err := range []error{pr.a.Post(SendWR{ID: 1, Op: OpSend, Stream: 1}), pr.a.PostRecv(RecvWR{ID: 2, Stream: 1})} {
		if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "no forward progress") {
			t.Errorf("post: %v", err)
		}
	}
	pr.b.Close()
	if err := pr.b.PostRecv(RecvWR{ID: 3, Stream: 1}); err != ErrClosed {
		t.Errorf("post after Close: %v", err)
	}
}
