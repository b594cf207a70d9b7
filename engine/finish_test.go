package engine

import (
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// TestFinishingPacketIsAckedAtOnce WRITEs 64 packets over two planes, the
// second's links 2 µs longer, so that the last packet sent, with AR, comes
// before packets sent just ahead of it on the slower plane. The receiver
// coalesces 64 packets an ACK, after a delay of 100 µs. The packet that
// places the WRITE's last bytes is acknowledged at once all the same: the
// WRITE completes a return trip after it arrived, not the ACK delay later.
func TestFinishingPacketIsAckedAtOnce(t *testing.T) {
	const ackDelay = 100 * time.Microsecond
	n := twoPlanes(t, Config{Paths: 2, Streams: 1, MaxPacket: 4160, AckDelay: ackDelay, AckEvery: 64}, 12*time.Microsecond)
	type arrival struct {
		at  clock.Time
		off uint32 // its bytes' offset in the WRITE
	}
	var arrivals []arrival
	n.fab.AddTap(func(e *netem.TapEvent) {
		var p proto.Packet
		if e.Verdict != netem.Delivered || e.Link.Kind() != netem.Downlink || e.Link.To() != 1 ||
			p.Decode(e.Datagram.Data) != nil || p.Type() != proto.TypeWrite {
			return
		}
		arrivals = append(arrivals, arrival{e.At, p.Write().MsgOffset()})
	})
	pr := n.connect(0, 1)
	start := n.sim.Now()
	pr.postWrite(t, 64)
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) {
		t.Fatal("the WRITE did not complete")
	}
	done := n.sim.Now()
	if st := pr.a.SenderStats(); st.Retransmits != 0 {
		t.Fatalf("nothing lost, yet %+v", st)
	}
	var last, end clock.Time // the last arrival, and the arrival of the WRITE's last bytes
	var endOff uint32
	for _, a := range arrivals {
		if a.at <= done {
			last = max(last, a.at)
			if a.off >= endOff {
				end, endOff = a.at, a.off
			}
		}
	}
	t.Logf("the WRITE's last packet sent arrived at %v, its last packet to arrive at %v; it completed at %v",
		end.Sub(start), last.Sub(start), done.Sub(start))
	if end >= last {
		t.Fatal("the last packet sent arrived last: the test tests nothing")
	}
	if gap := done.Sub(last); gap > 30*time.Microsecond {
		t.Fatalf("the WRITE completed %v after its last packet arrived, over a return trip of about 24us: it waited for the ACK delay", gap)
	}
}
