package engine

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// dropPort is a host's port that drops, once each, the first datagrams
// matching a predicate: a loss aimed at one packet.
type dropPort struct {
	link.Port
	match   func(*proto.Packet) bool
	dropped int
	limit   int
}

func (d *dropPort) Send(batch []link.Datagram) {
	kept := batch[:0]
	for _, dg := range batch {
		var pkt proto.Packet
		if d.dropped < d.limit && pkt.Decode(dg.Data) == nil && d.match(&pkt) {
			d.dropped++
			continue
		}
		kept = append(kept, dg)
	}
	d.Port.Send(kept)
}

// newNetWithDrop is newNet where host 0 sends through a dropPort.
func newNetWithDrop(t *testing.T, fc netem.Config, ec Config, drop *dropPort) *testNet {
	n := newNet(t, fc, ec)
	drop.Port = n.fab.Host(0)
	ep := n.hosts[0].ep
	ep.port = drop
	return n
}

func isFirstPacketOf(stream uint16, msn uint32) func(*proto.Packet) bool {
	return func(p *proto.Packet) bool {
		switch p.Type() {
		case proto.TypeSend:
			return p.Send().Stream() == stream && p.Send().MSN() == msn && p.Send().MsgOffset() == 0
		case proto.TypeWrite, proto.TypeWriteImm:
			return p.Write().Stream() == stream && p.Write().MSN() == msn && p.Write().MsgOffset() == 0
		}
		return false
	}
}

// A SEND that arrives before the one posted ahead of it on its stream lands
// in its own posted receive (by RSN), and both complete in order.
func TestSendOvertakingLandsInItsReceive(t *testing.T) {
	drop := &dropPort{match: isFirstPacketOf(0, 0), limit: 1}
	n := newNetWithDrop(t, fourPlanes(), Config{Paths: 4, Streams: 1}, drop)
	pr := n.connect(0, 1)
	first := pr.ha.region(t, 3000, 1, memreg.LocalWrite)
	second := pr.ha.region(t, 3000, 2, memreg.LocalWrite)
	recv0 := pr.hb.region(t, 3000, 0, memreg.LocalWrite)
	recv1 := pr.hb.region(t, 3000, 0, memreg.LocalWrite)
	pr.b.PostRecv(RecvWR{ID: 100, Local: SGE{recv0, 0, 3000}})
	pr.b.PostRecv(RecvWR{ID: 101, Local: SGE{recv1, 0, 3000}})
	pr.a.Post(SendWR{ID: 1, Op: OpSend, Local: SGE{first, 0, 3000}})
	pr.a.Post(SendWR{ID: 2, Op: OpSend, Local: SGE{second, 0, 3000}})
	// The second SEND is placed while the first waits for its resend.
	n.run(time.Second, func() bool { return pr.b.ReceiverStats().Packets >= 1 })
	if !bytes.Equal(recv1.Bytes(), second.Bytes()) || len(pr.rb.done) != 0 {
		t.Fatalf("the overtaking SEND was not placed in receive 101 ahead of time (completions %v)", pr.rb.done)
	}
	n.run(time.Second, func() bool { return len(pr.rb.done) == 2 })
	if drop.dropped != 1 || len(pr.rb.done) != 2 || pr.rb.done[0].ID != 100 || pr.rb.done[1].ID != 101 {
		t.Fatalf("dropped %d; receive completions %+v", drop.dropped, pr.rb.done)
	}
	if !bytes.Equal(recv0.Bytes(), first.Bytes()) || !bytes.Equal(recv1.Bytes(), second.Bytes()) {
		t.Fatal("a SEND landed in the wrong receive")
	}
}

// A loss on stream A does not hold back stream B: B's message, posted after
// A's, completes first.
func TestStreamsDoNotBlockEachOther(t *testing.T) {
	drop := &dropPort{match: isFirstPacketOf(0, 0), limit: 1}
	fc := fourPlanes()
	n := newNetWithDrop(t, fc, Config{Paths: 4, Streams: 2}, drop)
	pr := n.connect(0, 1)
	var srcs, dsts []*memreg.Region
	for s := 0; s < 2; s++ {
		srcs = append(srcs, pr.ha.region(t, 64<<10, uint64(s+5), memreg.LocalWrite))
		dsts = append(dsts, pr.hb.region(t, 64<<10, 0, memreg.LocalWrite))
		pr.b.PostRecv(RecvWR{ID: uint64(100 + s), Stream: uint16(s), Local: SGE{dsts[s], 0, 64 << 10}})
	}
	pr.a.Post(SendWR{ID: 1, Op: OpSend, Stream: 0, Local: SGE{srcs[0], 0, 64 << 10}})
	pr.a.Post(SendWR{ID: 2, Op: OpSend, Stream: 1, Local: SGE{srcs[1], 0, 64 << 10}})
	n.run(time.Second, func() bool { return len(pr.rb.done) == 2 })
	if drop.dropped != 1 || len(pr.rb.done) != 2 || pr.rb.done[0].Stream != 1 {
		t.Fatalf("dropped %d; receive completions %+v: stream 1 should finish first", drop.dropped, pr.rb.done)
	}
	for s := range srcs {
		if !bytes.Equal(srcs[s].Bytes(), dsts[s].Bytes()) {
			t.Fatalf("stream %d data differs", s)
		}
	}
}

// scripted feeds fixed 32-bit values (little-endian) to the engine's
// random draws, then falls back to a seeded stream.
type scripted struct {
	vals []uint32
	rest io.Reader
}

func (s *scripted) Read(p []byte) (int, error) {
	if len(s.vals) > 0 && len(p) == 4 {
		v := s.vals[0]
		s.vals = s.vals[1:]
		p[0], p[1], p[2], p[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		return 4, nil
	}
	return s.rest.Read(p)
}

// Sequence numbers that start just below 2^32 wrap in flight: PSNs of every
// path and DSNs of both directions cross zero mid-transfer, with loss.
func TestSequenceWrap(t *testing.T) {
	fc := fourPlanes()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.02}
	n := newNet(t, fc, Config{Paths: 8, Streams: 2})
	for h, hs := range n.hosts {
		// Draws: connection id, initial PSN, initial DSN.
		hs.ep.random = &scripted{vals: []uint32{0x1234 + uint32(h), 0xFFFFFFF0 - uint32(h), 0xFFFFFF80 + uint32(h)}, rest: seeded(9)}
	}
	pr := n.connect(0, 1)
	if pr.a.isn != 0xFFFFFFF0 || pr.b.peerIDSN != 0xFFFFFF80 {
		t.Fatalf("initial PSN %#x, DSN %#x", pr.a.isn, pr.b.peerIDSN)
	}
	x := &xfer{op: OpWrite, size: 2 << 20, streams: 2}
	x.start(t, pr)
	if !n.run(10*time.Second, func() bool { return x.finished(pr) }) {
		t.Fatalf("not finished: %+v", pr.a.SenderStats())
	}
	x.check(t, pr)
	for _, p := range pr.a.snd.paths {
		if !proto.SeqLess(p.epochStart[0], p.next) || p.next > 0x1000 {
			t.Errorf("path %d: PSN went from %#x to %#x without wrapping", p.id, p.epochStart[0], p.next)
		}
	}
	if d := pr.b.rcv.dsn.cum; d > 0x1000 {
		t.Errorf("cumulative DSN %#x did not wrap", d)
	}
}

// A peer that vanishes ends the connection with ErrTimeout within the
// no-progress time, and the work in flight completes with a timeout status.
func TestVanishedPeer(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 4, NoProgress: 20 * time.Millisecond})
	pr := n.connect(0, 1)
	n.fab.Host(1).Attach(nil) // host 1 is gone
	src := pr.ha.region(t, 1<<20, 3, memreg.LocalWrite)
	start := n.sim.Now()
	pr.a.Post(SendWR{ID: 9, Op: OpWrite, Local: SGE{src, 0, 1 << 20}, RKey: 1})
	n.run(time.Second, func() bool { return pr.a.State() == Closed })
	elapsed := n.sim.Now().Sub(start)
	if pr.a.State() != Closed || pr.a.Err() != ErrTimeout {
		t.Fatalf("state %v, error %v", pr.a.State(), pr.a.Err())
	}
	if elapsed > 20*time.Millisecond+time.Millisecond {
		t.Fatalf("failed after %v, configured 20ms", elapsed)
	}
	if len(pr.ra.done) != 1 || pr.ra.done[0].Status != StatusTimeout || pr.ra.done[0].ID != 9 {
		t.Fatalf("completions %+v", pr.ra.done)
	}
	if n.sim.Pending() > 64 {
		// Timers of a closed connection are stopped; what remains is the
		// fabric draining.
		t.Errorf("%d events still pending after the close", n.sim.Pending())
	}
}
