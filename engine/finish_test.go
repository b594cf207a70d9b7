package engine

import (
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// TestFinishingPacketIsAckedAtOnce sends a WRITE, and a SEND, of 64
// packets over two planes, the second's links 2 µs longer, so that the
// last packet sent, with AR, comes before packets sent just ahead of it on
// the slower plane. The receiver coalesces 64 packets an ACK, after a delay
// of 100 µs. The packet that places the message's last bytes is
// acknowledged at once all the same: the message completes at the sender a
// return trip after it arrived, not the ACK delay later.
func TestFinishingPacketIsAckedAtOnce(t *testing.T) {
	for _, op := range []Opcode{OpWrite, OpSend} {
		t.Run(op.String(), func(t *testing.T) { finishAckedAtOnce(t, op) })
	}
}

func finishAckedAtOnce(t *testing.T, op Opcode) {
	const ackDelay = 100 * time.Microsecond
	const packets, size = 64, 64 * 4096
	n := twoPlanes(t, Config{Paths: 2, Streams: 1, MaxPacket: 4160, AckDelay: ackDelay, AckEvery: 64}, 12*time.Microsecond)
	type arrival struct {
		at  clock.Time
		off uint32 // its bytes' offset in the message
	}
	var arrivals []arrival
	n.fab.AddTap(func(e *netem.TapEvent) {
		var p proto.Packet
		if e.Verdict != netem.Delivered || e.Link.Kind() != netem.Downlink || e.Link.To() != 1 || p.Decode(e.Datagram.Data) != nil {
			return
		}
		switch p.Type() {
		case proto.TypeWrite:
			arrivals = append(arrivals, arrival{e.At, p.Write().MsgOffset()})
		case proto.TypeSend:
			arrivals = append(arrivals, arrival{e.At, p.Send().MsgOffset()})
		}
	})
	pr := n.connect(0, 1)
	start := n.sim.Now()
	if op == OpWrite {
		pr.postWrite(t, packets)
	} else {
		src := pr.ha.region(t, size, 1, memreg.LocalWrite)
		inbox := pr.hb.region(t, size, 0, memreg.LocalWrite)
		if err := pr.b.PostRecv(RecvWR{ID: 1, Local: SGE{inbox, 0, size}}); err != nil {
			t.Fatal(err)
		}
		if err := pr.a.Post(SendWR{ID: 1, Op: OpSend, Local: SGE{src, 0, size}}); err != nil {
			t.Fatal(err)
		}
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) {
		t.Fatalf("the %v did not complete", op)
	}
	done := n.sim.Now()
	if st := pr.a.SenderStats(); st.Retransmits != 0 {
		t.Fatalf("nothing lost, yet %+v", st)
	}
	var last, end clock.Time // the last arrival, and the arrival of the message's last bytes
	var endOff uint32
	for _, a := range arrivals {
		if a.at <= done {
			last = max(last, a.at)
			if a.off >= endOff {
				end, endOff = a.at, a.off
			}
		}
	}
	t.Logf("the %v's last packet sent arrived at %v, its last packet to arrive at %v; it completed at %v",
		op, end.Sub(start), last.Sub(start), done.Sub(start))
	if end >= last {
		t.Fatal("the last packet sent arrived last: the test tests nothing")
	}
	if gap := done.Sub(last); gap > 30*time.Microsecond {
		t.Fatalf("the %v completed %v after its last packet arrived, over a return trip of about 24us: it waited for the ACK delay", op, gap)
	}
}
