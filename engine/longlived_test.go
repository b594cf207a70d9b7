package engine

import (
	"bytes"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
)

// A path that never moves stays in one epoch however many packets it
// sends. Once it has sent 2^31 PSNs past the epoch's first, serial order
// (spec section 2) would put every new PSN before that first one, and
// every ACK record of the epoch would be ignored as older than its start
// (spec section 7.1): the connection would stall. The sender keeps the
// epoch's start near its next PSN instead. Here the paths' epochs begin
// that far back: the WRITE's ACK records are all taken, none ignored, and
// it ends with nothing resent.
func TestEpochLongerThanHalfThePSNSpace(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 4, Streams: 1, PlaceholderPayloads: false})
	pr := n.connect(0, 1)
	pr.a.snd.equip()
	for _, p := range pr.a.snd.paths {
		// The path's epoch began 2^31 + 1000 PSNs before its next.
		p.Init(p.ID(), p.Plane(), &pr.a.snd.ports, p.next-(1<<31+1000), p)
	}
	src, dst := postWrite(t, pr, 1<<20)
	if !n.run(100*time.Millisecond, func() bool { return len(pr.ra.done) == 1 }) {
		t.Fatalf("the WRITE did not complete: %+v", pr.a.SenderStats())
	}
	st := pr.a.SenderStats()
	if pr.ra.done[0].Status != StatusOK || !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatalf("completion %+v; data equal %v", pr.ra.done[0], bytes.Equal(src.Bytes(), dst.Bytes()))
	}
	if st.BadAcks != 0 || st.Retransmits != 0 || st.Timeouts != 0 {
		t.Errorf("%d ACK records ignored, %d packets resent, %d timeouts; want none", st.BadAcks, st.Retransmits, st.Timeouts)
	}
}

// A connection sends a WRITE over every path, idles for idle, then WRITEs
// one packet, which goes on one path. The receiver's ACKs then repeat the
// records of the idle paths as well, whose newest packet arrived idle ago:
// their ServiceTime, which saturates at 2^32-1 ns, and the receiver's clock
// measured. Only a record that reports its newest PSN for the first time
// measures a round trip: no path's smoothed RTT may move off the fabric's
// few microseconds. Without that rule, 5 s of idle left the idle paths'
// smoothed RTT at 57 ms.
func TestIdlePathRecordsTakeNoRTTSample(t *testing.T) {
	for _, idle := range []time.Duration{10 * time.Millisecond, time.Second, 5 * time.Second, 7 * time.Second} {
		n, pr := writeAfterAnIdle(t, idle)
		n.run(time.Millisecond, func() bool { return false }) // the repeats
		for _, p := range pr.a.snd.paths {
			if p.RTT.SRTT > 100*time.Microsecond {
				t.Errorf("idle %v: path %d's smoothed RTT is %v, its least %v", idle, p.ID(), p.RTT.SRTT, p.RTT.Min)
			}
		}
	}
}

// After a long idle, a WRITE of one packet: the receiver acknowledges it,
// and, the sender quiet after it, repeats its records a few ACK delays
// later, against the loss of that ACK (ackRepeatAfter). The gap of the
// idle is no gap between a sender's packets: before, it entered the
// receiver's average of them, and the repeat came half the idle later,
// 5 s after 10 s, where the sender's tail probe had long resent the
// packet.
func TestRepeatAckAfterAnIdle(t *testing.T) {
	for _, idle := range []time.Duration{time.Millisecond, 10 * time.Second} {
		n, pr := writeAfterAnIdle(t, idle)
		acks := pr.accepted.ReceiverStats().AcksSent
		n.run(100*time.Microsecond, func() bool { return false })
		if repeats := pr.accepted.ReceiverStats().AcksSent - acks; repeats == 0 {
			t.Errorf("idle %v: no ACK repeated within 100 µs of the last", idle)
		}
	}
}

// writeAfterAnIdle connects two hosts over 4 paths on 2 planes, WRITEs 64
// packets, which go over every path, idles for idle, and WRITEs one
// packet, which goes on one path. It returns as that WRITE completes.
func writeAfterAnIdle(t *testing.T, idle time.Duration) (*testNet, *pair) {
	t.Helper()
	n := newNet(t, twoHostFabric(2), Config{Paths: 4, Streams: 1})
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 64*4096, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, 64*4096, 0, memreg.LocalWrite|memreg.RemoteWrite)
	for i, size := range []uint32{64 * 4096, 4096} {
		if i == 1 {
			n.run(idle, func() bool { return false })
		}
		if err := pr.a.Post(SendWR{ID: uint64(i), Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()}); err != nil {
			t.Fatal(err)
		}
		if !n.run(time.Second, func() bool { return len(pr.ra.done) == i+1 }) {
			t.Fatalf("idle %v: WRITE %d did not complete", idle, i)
		}
	}
	return n, pr
}
