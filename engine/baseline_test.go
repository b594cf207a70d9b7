package engine

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

func baselineConfig() Config { return Config{Mode: proto.ModeBaseline, BaselineWindow: 32, Streams: 4} }

// TestBaselineUnderLoss checks that a baseline connection is negotiated
// with one path and carries WRITE, SEND and READ in order under loss, byte
// for byte, by go-back-N. After every event its count of packets in flight
// is its path's.
func TestBaselineUnderLoss(t *testing.T) {
	fc := fourPlanes()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.01}
	n := newNet(t, fc, baselineConfig())
	pr := n.connect(0, 1)
	if pr.a.Paths() != 1 || !isBaseline(pr.a) || !isBaseline(pr.b) {
		t.Fatalf("paths %d, baseline %v/%v", pr.a.Paths(), isBaseline(pr.a), isBaseline(pr.b))
	}
	src := pr.ha.region(t, 1<<20, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, 1<<20, 0, memreg.LocalWrite|memreg.RemoteWrite|memreg.RemoteRead)
	inbox := pr.hb.region(t, 1<<20, 0, memreg.LocalWrite)
	back := pr.ha.region(t, 1<<20, 0, memreg.LocalWrite)
	pr.b.PostRecv(RecvWR{ID: 7, Stream: 1, Local: SGE{inbox, 0, 1 << 20}})
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 1 << 20}, RKey: dst.Key()})
	pr.a.Post(SendWR{ID: 2, Op: OpSend, Stream: 1, Local: SGE{src, 0, 1 << 20}})
	pr.a.Post(SendWR{ID: 3, Op: OpRead, Local: SGE{back, 0, 1 << 20}, RKey: dst.Key()})
	done := func() bool {
		checkInflight(t, n.sim.Now(), &pr.a.snd, &pr.b.snd)
		return len(pr.ra.done) == 3 && len(pr.rb.done) == 1
	}
	if !n.run(time.Second, done) {
		t.Fatalf("completions %+v / %+v: %v", pr.ra.done, pr.rb.done, pr.a.Err())
	}
	for _, wc := range append(pr.ra.done, pr.rb.done...) {
		if wc.Status != StatusOK {
			t.Fatalf("%+v", wc)
		}
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) || !bytes.Equal(src.Bytes(), inbox.Bytes()) || !bytes.Equal(src.Bytes(), back.Bytes()) {
		t.Fatal("data differs")
	}
	if st := pr.b.ReceiverStats(); st.OutOfOrder == 0 || st.Nacks[proto.NackSeqErr] == 0 {
		t.Errorf("1%% loss caused no go-back: %+v", st)
	}
}

// TestBaselineRNRDoesNotFlood checks that a receiver not ready stops a
// baseline sender for the RNR wait instead of being flooded. Every 100 µs,
// the RNR timer fixed as in RoCEv2, the sender goes back and resends its 16
// packets. That is about 20 x 16 packets over 2 ms, not thousands.
func TestBaselineRNRDoesNotFlood(t *testing.T) {
	n := newNet(t, twoHostFabric(1), baselineConfig())
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 64<<10, 1, memreg.LocalWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpSend, Local: SGE{src, 0, 64 << 10}})
	n.run(2*time.Millisecond, func() bool { return false })
	if sent := pr.a.SenderStats().Packets; sent > 21*16+16 {
		t.Fatalf("%d packets sent to a receiver not ready for 2 ms", sent)
	}
	dst := pr.hb.region(t, 64<<10, 0, memreg.LocalWrite)
	pr.b.PostRecv(RecvWR{ID: 9, Local: SGE{dst, 0, 64 << 10}})
	if !n.run(100*time.Millisecond, func() bool { return len(pr.rb.done) == 1 }) || !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatal("the SEND never landed")
	}
}

// TestBaselinePlaneDownAndUp fails the plane of a baseline connection and
// brings it back mid-transfer. The sender waits, goes back to the oldest
// unacknowledged PSN, and finishes.
func TestBaselinePlaneDownAndUp(t *testing.T) {
	fc := twoHostFabric(1)
	fc.Faults = []netem.Fault{{At: 100 * time.Microsecond, Kind: netem.PlaneDown, Plane: 0},
		{At: 300 * time.Microsecond, Kind: netem.Repair, Plane: 0}}
	n := newNet(t, fc, baselineConfig())
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 8<<20, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, 8<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 8 << 20}, RKey: dst.Key()})
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || pr.ra.done[0].Status != StatusOK {
		t.Fatalf("not complete: %+v %v", pr.ra.done, pr.a.Err())
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatal("data differs")
	}
}

// TestBaselineAckLoss loses ACKs for a while. The sender's ACK timeout goes
// back, and the cumulative DSN of later ACKs frees its window and its count
// of packets in flight, which is checked after every event. The next WRITE
// goes out.
func TestBaselineAckLoss(t *testing.T) {
	n := newNet(t, twoHostFabric(1), baselineConfig())
	pr := n.connect(0, 1)
	acksDropped := 0
	n.hosts[1].ep.port = &portFilter{Port: n.fab.Host(1), drop: func(d *link.Datagram) bool {
		if proto.Type(d.Data[1]) == proto.TypeAck && n.sim.Now() < 200_000 {
			acksDropped++
			return true
		}
		return false
	}}
	src := pr.ha.region(t, 1<<20, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, 1<<20, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 512 << 10}, RKey: dst.Key()})
	pr.a.Post(SendWR{ID: 2, Op: OpWrite, Local: SGE{src, 512 << 10, 512 << 10}, RKey: dst.Key(), RemoteOffset: 512 << 10})
	done := func() bool {
		checkInflight(t, n.sim.Now(), &pr.a.snd)
		return len(pr.ra.done) == 2
	}
	if !n.run(time.Second, done) {
		t.Fatalf("completions %+v after %d ACKs dropped", pr.ra.done, acksDropped)
	}
	if acksDropped == 0 || !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatalf("dropped %d ACKs; data equal %v", acksDropped, bytes.Equal(src.Bytes(), dst.Bytes()))
	}
}

// TestBaselineCumulativeAckFreesTheWindow checks that an ACK whose records
// are missing still frees a baseline sender's window. The transmissions its
// cumulative DSN covers are resolved, on the path and in the connection's
// count of packets in flight.
func TestBaselineCumulativeAckFreesTheWindow(t *testing.T) {
	n := newNet(t, twoHostFabric(1), baselineConfig())
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 64<<10, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, 64<<10, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 64 << 10}, RKey: dst.Key()})
	s := &pr.a.snd
	n.run(time.Second, func() bool { return s.inflight() >= 4 })
	if s.inflight() < 4 || s.una == s.nextDSN {
		t.Fatalf("%d packets in flight, DSNs %d to %d", s.inflight(), s.una, s.nextDSN)
	}
	var ack proto.Packet
	if err := proto.Build(&ack, make([]byte, 256), proto.TypeAck, 0, 0); err != nil {
		t.Fatal(err)
	}
	ack.Common.SetDstConnID(pr.a.localID)
	ack.Ack().SetCumDSN(s.nextDSN)
	ack.Ack().SetRateHint(proto.RateNoLimit)
	d := link.Datagram{Src: netip.AddrPortFrom(netem.Addr(0, 1), 4797), Dst: netip.AddrPortFrom(netem.Addr(0, 0), 4797),
		Data: ack.Seal()}
	n.hosts[0].ep.Receive(&d, n.sim.Now())
	checkInflight(t, n.sim.Now(), s)
	if p := s.paths[0]; s.una != s.nextDSN-uint32(s.inflight()) || p.oldest != p.next-uint32(p.inflight) {
		t.Fatalf("after the ACK: DSNs %d to %d, %d in flight; PSNs %d to %d", s.una, s.nextDSN, s.inflight(), p.oldest, p.next)
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatalf("completions %+v", pr.ra.done)
	}
}

func isBaseline(c *Conn) bool {
	_, ok := c.tp.(*baseline)
	return ok
}
