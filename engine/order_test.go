package engine

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// dropPort is a host's port that drops the first datagrams matching a
// predicate, up to limit. It aims a loss at chosen packets.
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

// TestSendOvertakingLandsInItsReceive checks that a SEND that arrives
// before the one posted ahead of it on its stream lands in its own posted
// receive, by RSN, and that both complete in order. Without receive
// credits, both go in the first round trip; with them, the second would
// wait for the receiver to name its receive.
func TestSendOvertakingLandsInItsReceive(t *testing.T) {
	drop := &dropPort{match: isFirstPacketOf(0, 0), limit: 1}
	n := newNetWithDrop(t, fourPlanes(), Config{Paths: 4, Streams: 1, NoCredits: true}, drop)
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

// timedEvents records when each completion came.
type timedEvents struct {
	recorder
	sim *clock.Sim
	at  map[uint64]clock.Time
}

func (e *timedEvents) Completion(c *Conn, wc Completion) {
	e.recorder.Completion(c, wc)
	e.at[wc.ID] = e.sim.Now()
}

// TestStreamsDoNotBlockEachOther checks that a loss on stream A does not
// hold back stream B. A's last packet is lost twice, the packet and its
// first resend, so A waits for a tail probe or a timeout. B's message,
// posted after A's, completes as it would have without any loss.
func TestStreamsDoNotBlockEachOther(t *testing.T) {
	const sizeA, sizeB = 256 << 10, 4 << 10
	run := func(drops int) (a, b clock.Time) {
		drop := &dropPort{match: func(p *proto.Packet) bool {
			return p.Type() == proto.TypeSend && p.Send().Stream() == 0 && p.Send().MsgOffset()+uint32(len(p.Payload)) == sizeA
		}, limit: drops}
		n := newNetWithDrop(t, fourPlanes(), Config{Paths: 4, Streams: 2}, drop)
		pr := n.connect(0, 1)
		ev := &timedEvents{sim: n.sim, at: map[uint64]clock.Time{}}
		pr.b.events = ev
		srcA, srcB := pr.ha.region(t, sizeA, 5, memreg.LocalWrite), pr.ha.region(t, sizeB, 6, memreg.LocalWrite)
		dstA, dstB := pr.hb.region(t, sizeA, 0, memreg.LocalWrite), pr.hb.region(t, sizeB, 0, memreg.LocalWrite)
		pr.b.PostRecv(RecvWR{ID: 100, Stream: 0, Local: SGE{dstA, 0, sizeA}})
		pr.b.PostRecv(RecvWR{ID: 101, Stream: 1, Local: SGE{dstB, 0, sizeB}})
		pr.a.Post(SendWR{ID: 1, Op: OpSend, Stream: 0, Local: SGE{srcA, 0, sizeA}})
		pr.a.Post(SendWR{ID: 2, Op: OpSend, Stream: 1, Local: SGE{srcB, 0, sizeB}})
		n.run(time.Second, func() bool { return len(ev.done) == 2 })
		if drop.dropped != drops || len(ev.done) != 2 {
			t.Fatalf("dropped %d; receive completions %+v", drop.dropped, ev.done)
		}
		if !bytes.Equal(srcA.Bytes(), dstA.Bytes()) || !bytes.Equal(srcB.Bytes(), dstB.Bytes()) {
			t.Fatal("data differs")
		}
		return ev.at[100], ev.at[101]
	}
	cleanA, cleanB := run(0)
	lossA, lossB := run(2)
	if lossA-cleanA < clock.Time(10*time.Microsecond) {
		t.Fatalf("the losses delayed stream A only %v: the test proves nothing", time.Duration(lossA-cleanA))
	}
	if lossB-cleanB > clock.Time(time.Microsecond) {
		t.Errorf("stream B completed at %v with stream A's losses, at %v without: it waited", lossB, cleanB)
	}
}

// scripted feeds fixed 32-bit values, little-endian, to the engine's random
// draws, then falls back to a seeded stream.
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

// TestSequenceWrap starts the sequence numbers just below 2^32, so that
// they wrap in flight. The PSNs of every path and the DSNs of both
// directions cross zero mid-transfer, with loss.
func TestSequenceWrap(t *testing.T) {
	fc := fourPlanes()
	fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.02}
	n := newNet(t, fc, Config{Paths: 8, Streams: 2})
	for h, hs := range n.hosts {
		// The draws are the connection id, the initial PSN and the initial
		// DSN.
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
		if !proto.SeqLess(p.EpochStart(0), p.next) || p.next > 0x1000 {
			t.Errorf("path %d: PSN went from %#x to %#x without wrapping", p.ID(), p.EpochStart(0), p.next)
		}
	}
	if d := pr.b.rcv.dsn.cum; d > 0x1000 {
		t.Errorf("cumulative DSN %#x did not wrap", d)
	}
}

// TestVanishedPeer checks that a peer that vanishes ends the connection
// with ErrTimeout within the no-progress time, and that the work in flight
// completes with a timeout status.
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
		// The timers of a closed connection are stopped. What remains is
		// the fabric draining.
		t.Errorf("%d events still pending after the close", n.sim.Pending())
	}
}

// TestReadyStreamsHoldEveryStreamWithData checks that a sender that looks
// for data only on the streams it has marked ready misses none. The run has
// WRITEs, SENDs refused with RNR until receives are posted, READs beyond
// the limit, and READ responses on the internal stream. After every event,
// every stream with a message to send and nothing refused is marked, or
// waits for receive credit with the credit wait running. The
// sender's count of packets in flight is its paths' summed, though NACKs
// release packets too. The WRITE's stream, sent long before, ends unmarked,
// and everything completes.
func TestReadyStreamsHoldEveryStreamWithData(t *testing.T) {
	n := newNet(t, fourPlanes(), Config{Paths: 4, Streams: 4, MaxReadsOut: 2})
	pr := n.connect(0, 1)
	const size, sends = 64 << 10, 16 // 4 KiB SENDs, more than go out before the first refusal returns
	src := pr.ha.region(t, size, 7, memreg.LocalWrite)
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite|memreg.RemoteRead)
	back := pr.ha.region(t, size, 0, memreg.LocalWrite)
	inbox := pr.hb.region(t, size, 0, memreg.LocalWrite)
	aSrc := pr.ha.region(t, size, 9, memreg.LocalWrite|memreg.RemoteRead)
	bDst := pr.hb.region(t, size, 0, memreg.LocalWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Stream: 0, Local: SGE{src, 0, size}, RKey: dst.Key()})
	for i := range sends {
		pr.a.Post(SendWR{ID: uint64(100 + i), Op: OpSend, Stream: 1, Local: SGE{src, uint64(i) * 4096, 4096}})
	}
	for i := range 4 {
		pr.a.Post(SendWR{ID: uint64(20 + i), Op: OpRead, Stream: 2, Local: SGE{back, uint64(i) * 1024, 1024}, RKey: dst.Key(), RemoteOffset: uint64(i) * 1024})
	}
	pr.b.Post(SendWR{ID: 30, Op: OpRead, Stream: 3, Local: SGE{bDst, 0, size}, RKey: aSrc.Key()}) // a answers on its internal stream
	posted := false
	for n.sim.Step() {
		if !posted && n.sim.Now() > clock.Time(300*time.Microsecond) {
			posted = true // the SENDs were refused until now
			for i := range sends {
				pr.b.PostRecv(RecvWR{ID: uint64(200 + i), Stream: 1, Local: SGE{inbox, uint64(i) * 4096, 4096}})
			}
		}
		for _, s := range []*sender{&pr.a.snd, &pr.b.snd} {
			for k := range s.streams {
				st := &s.streams[k]
				switch {
				case st.sendIdx >= len(st.queue) || st.refused > 0:
				case st.heldByCredit(st.queue[st.sendIdx]):
					if s.held.next(k, k+1) != k && s.ready.next(k, k+1) != k || s.creditT == nil || s.creditT.Deadline() == clock.Never {
						t.Fatalf("at %v: stream %d waits for credit with no credit wait running", n.sim.Now(), k)
					}
				case s.ready.next(k, k+1) != k:
					t.Fatalf("at %v: stream %d has data to send and is not marked ready", n.sim.Now(), k)
				}
			}
		}
		checkInflight(t, n.sim.Now(), &pr.a.snd, &pr.b.snd)
		if len(pr.ra.done) == 1+sends+4 && len(pr.rb.done) == 1+sends {
			break
		}
	}
	if len(pr.ra.done) != 1+sends+4 || len(pr.rb.done) != 1+sends {
		t.Fatalf("completions: %d at a (want %d), %d at b (want %d)", len(pr.ra.done), 1+sends+4, len(pr.rb.done), 1+sends)
	}
	if a := &pr.a.snd; a.ready.next(0, 1) == 0 {
		t.Error("the WRITE's stream, sent long ago, is still marked ready")
	}
	if pr.b.ReceiverStats().Nacks[proto.NackRNR] == 0 {
		t.Fatal("the run did not exercise refusals: no RNR NACK")
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) || !bytes.Equal(bDst.Bytes(), aSrc.Bytes()) || !bytes.Equal(inbox.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
}
