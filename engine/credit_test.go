package engine

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// slowReceiver SENDs count messages of size bytes from host 0 to host 1,
// whose application posts first receives at once and then one more every
// every, slower than the network delivers. It returns both ends' counters
// once every SEND landed.
func slowReceiver(t *testing.T, cfg Config, count, size, first int, every time.Duration) (SenderStats, ReceiverStats) {
	t.Helper()
	n := newNet(t, twoHostFabric(2), cfg)
	pr := n.connect(0, 1)
	src := pr.ha.region(t, count*size, 1, memreg.LocalWrite)
	inbox := pr.hb.region(t, count*size, 0, memreg.LocalWrite)
	posted := 0
	post := func() {
		pr.b.PostRecv(RecvWR{ID: uint64(posted), Local: SGE{inbox, uint64(posted * size), uint32(size)}})
		posted++
	}
	for range first {
		post()
	}
	for i := range count {
		if err := pr.a.Post(SendWR{ID: uint64(i), Op: OpSend, Local: SGE{src, uint64(i * size), uint32(size)}}); err != nil {
			t.Fatal(err)
		}
	}
	var tick func()
	tick = func() {
		if posted < count {
			post()
			n.sim.At(n.sim.Now().Add(every), clock.Func(tick))
		}
	}
	n.sim.At(n.sim.Now().Add(every), clock.Func(tick))
	if !n.run(time.Second, func() bool { return len(pr.rb.done) == count }) {
		t.Fatalf("%d of %d SENDs landed; %+v", len(pr.rb.done), count, pr.a.SenderStats())
	}
	if !bytes.Equal(inbox.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
	return pr.a.SenderStats(), pr.b.ReceiverStats()
}

// A receiver whose application posts its receives more slowly than the
// network delivers SENDs names, in its ACKs, how far its receives reach.
// The sender starts no SEND beyond that: nothing is refused for want of a
// receive and nothing is sent twice. Without credits the same run refuses
// SENDs with RNR and resends them.
func TestCreditsKeepSendsWithinTheReceives(t *testing.T) {
	const count, size = 48, 16 << 10 // 4 packets a SEND
	with, withR := slowReceiver(t, Config{Paths: 4, Streams: 1}, count, size, 4, 20*time.Microsecond)
	if rnr := withR.Nacks[proto.NackRNR]; rnr != 0 || with.Retransmits != 0 || with.CreditOverdraws != 0 {
		t.Errorf("with credits: %d RNR NACKs, %d retransmissions, %d overdraws; want none", rnr, with.Retransmits, with.CreditOverdraws)
	}
	without, withoutR := slowReceiver(t, Config{Paths: 4, Streams: 1, NoCredits: true}, count, size, 4, 20*time.Microsecond)
	if withoutR.Nacks[proto.NackRNR] == 0 || without.Retransmits == 0 {
		t.Errorf("without credits: %d RNR NACKs, %d retransmissions; the run tests nothing", withoutR.Nacks[proto.NackRNR], without.Retransmits)
	}
}

// Credits are a capability: a peer that does not offer it gets ACKs that
// name nothing, and a connection with one such side has no credits.
func TestCreditsAreNegotiated(t *testing.T) {
	for _, side := range []int{0, 1} {
		n := newNet(t, twoHostFabric(1), Config{Paths: 2})
		n.hosts[side].ep.cfg.NoCredits = true
		pr := n.connect(0, 1)
		if pr.a.credits || pr.b.credits {
			t.Errorf("host %d without credits: the connection has them (%v, %v)", side, pr.a.credits, pr.b.credits)
		}
		if st, lim := pr.b.rcv.credit(); st != proto.NoCreditStream || lim != 0 {
			t.Errorf("host %d without credits: an ACK would name stream %d limit %d", side, st, lim)
		}
	}
	n := newNet(t, twoHostFabric(1), Config{Paths: 2})
	if pr := n.connect(0, 1); !pr.a.credits || !pr.b.credits {
		t.Error("two endpoints that offer credits did not agree on them")
	}
}

// A limit only moves forward, and an ACK naming a stream the connection
// does not have is counted and changes nothing.
func TestCreditLimitOnlyMovesForward(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 2, Streams: 2})
	pr := n.connect(0, 1)
	s := &pr.a.snd
	s.takeCredit(1, 10)
	s.takeCredit(1, 5) // an older ACK, late
	if st := &s.streams[1]; !st.limited || st.limit != 10 {
		t.Fatalf("stream 1: limited %v at %d, want 10", st.limited, st.limit)
	}
	s.takeCredit(1, 3) // past 65535: serial order
	s.takeCredit(1, 0xfffe)
	if st := &s.streams[1]; st.limit != 10 {
		t.Fatalf("a limit 32768 behind moved it to %d", st.limit)
	}
	bad := s.stats.BadAcks
	s.takeCredit(7, 100)
	if s.stats.BadAcks != bad+1 {
		t.Fatal("a credit for stream 7 of 2 was not counted")
	}
}

// When every ACK that would name new receives is lost, and nothing is in
// flight to bring another, the sender waits a retransmission timeout and
// sends the held SEND anyway. It lands, since its receive was posted.
func TestCreditWaitCoversALostUpdate(t *testing.T) {
	drop := &dropPort{match: func(p *proto.Packet) bool { return p.Type() == proto.TypeAck }}
	n := newNet(t, twoHostFabric(1), Config{Paths: 2, Streams: 1})
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 200, 1, memreg.LocalWrite)
	inbox := pr.hb.region(t, 200, 0, memreg.LocalWrite)
	pr.b.PostRecv(RecvWR{ID: 1, Local: SGE{inbox, 0, 100}})
	pr.a.Post(SendWR{ID: 1, Op: OpSend, Local: SGE{src, 0, 100}})
	if !n.run(10*time.Millisecond, func() bool { return len(pr.rb.done) == 1 }) {
		t.Fatal("the first SEND did not land")
	}
	n.run(time.Millisecond, func() bool { return false }) // its ACK names the limit: 1
	if st := &pr.a.snd.streams[0]; !st.limited || st.limit != 1 {
		t.Fatalf("stream 0 after the first SEND: limited %v at %d, want 1", st.limited, st.limit)
	}
	pr.a.Post(SendWR{ID: 2, Op: OpSend, Local: SGE{src, 100, 100}}) // held: no receive for it yet
	n.run(20*time.Microsecond, func() bool { return false })        // less than the credit wait
	if st := pr.a.SenderStats(); st.Packets != 1 {
		t.Fatalf("%d packets sent, want the first SEND's alone: the second was not held", st.Packets)
	}
	drop.Port, drop.limit = pr.b.ep.port, 1<<30
	pr.b.ep.port = drop // every ACK from here is lost, the update with them
	pr.b.PostRecv(RecvWR{ID: 2, Local: SGE{inbox, 100, 100}})
	if !n.run(100*time.Millisecond, func() bool { return len(pr.rb.done) == 2 }) {
		t.Fatalf("the held SEND never went: %+v", pr.a.SenderStats())
	}
	if o, rnr := pr.a.SenderStats().CreditOverdraws, pr.b.ReceiverStats().Nacks[proto.NackRNR]; o != 1 || rnr != 0 {
		t.Errorf("%d overdraws and %d RNR NACKs, want 1 and none", o, rnr)
	}
	if !bytes.Equal(inbox.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
}

// A SEND that went before the receiver named any limit, and was refused
// for want of a receive, waits for a limit past it rather than for the
// RNR's back-off: once the receive is posted, it lands within a few round
// trips.
func TestRefusedSendWaitsForCredit(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 2, Streams: 1})
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 100, 1, memreg.LocalWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpSend, Local: SGE{src, 0, 100}})
	n.run(3*time.Millisecond, func() bool { return false }) // refused, and retried with back-off
	if pr.b.ReceiverStats().Nacks[proto.NackRNR] == 0 {
		t.Fatal("the SEND was not refused: the test tests nothing")
	}
	dst := pr.hb.region(t, 100, 0, memreg.LocalWrite)
	posted := n.sim.Now()
	pr.b.PostRecv(RecvWR{ID: 9, Local: SGE{dst, 0, 100}})
	if !n.run(50*time.Millisecond, func() bool { return len(pr.rb.done) == 1 }) || !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("the SEND never landed")
	}
	if took := n.sim.Now().Sub(posted); took > 50*time.Microsecond {
		t.Errorf("the SEND landed %v after its receive was posted; a few round trips are 20 µs", took)
	}
}

// A receiver whose receives come from a shared queue names no stream, and
// that lifts the first limit of every stream: 200 SENDs to it go at the
// network's pace, none held, none sent beyond its receives.
func TestSharedQueueReceiverLiftsTheLimits(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 2, Streams: 2})
	server := n.hosts[1]
	srq := server.ep.NewSRQ(server.pd)
	rec := &recorder{}
	server.ep.Listen(server.pd, func(c *Conn) (Events, bool) {
		if err := c.UseSRQ(srq); err != nil {
			t.Error(err)
		}
		return rec, true
	})
	const count, size = 200, 3000
	buf := server.region(t, count*size, 0, memreg.LocalWrite)
	for i := range count {
		srq.PostRecv(RecvWR{ID: uint64(i), Local: SGE{buf, uint64(i * size), size}})
	}
	src := n.hosts[0].region(t, count*size, 4, memreg.LocalWrite)
	conn, _ := n.hosts[0].ep.Connect([]netip.Addr{netem.Addr(0, 1)}, proto.DefaultPort, n.hosts[0].pd, &recorder{})
	n.run(time.Second, func() bool { return conn.State() == Established })
	for m := range count {
		conn.Post(SendWR{ID: uint64(m), Op: OpSend, Stream: uint16(m % 2), Local: SGE{src, uint64(m * size), size}})
	}
	if !n.run(5*time.Millisecond, func() bool { return len(rec.done) == count }) {
		t.Fatalf("%d of %d SENDs landed in 5 ms; %+v", len(rec.done), count, conn.SenderStats())
	}
	if o := conn.SenderStats().CreditOverdraws; o != 0 {
		t.Errorf("%d overdraws: the streams were held", o)
	}
}

// With two streams held, an ACK naming one of them does not end the other's
// credit wait, and a name an ACK lost is named again: the ACK that names
// stream 1's new limit is lost, and stream 1's SEND still goes soon.
func TestLostNameOfOneStreamOfTwo(t *testing.T) {
	drop := &dropPort{}
	n := newNet(t, twoHostFabric(1), Config{Paths: 2, Streams: 2})
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 400, 1, memreg.LocalWrite)
	inbox := pr.hb.region(t, 400, 0, memreg.LocalWrite)
	for k := range 2 { // a first SEND on each stream, so that both are named
		pr.b.PostRecv(RecvWR{ID: uint64(k), Stream: uint16(k), Local: SGE{inbox, uint64(k * 100), 100}})
		pr.a.Post(SendWR{ID: uint64(k), Op: OpSend, Stream: uint16(k), Local: SGE{src, uint64(k * 100), 100}})
	}
	if !n.run(10*time.Millisecond, func() bool { return len(pr.rb.done) == 2 }) {
		t.Fatal("the first SENDs did not land")
	}
	n.run(time.Millisecond, func() bool { return false })
	for k := range 2 { // now held: no receive for either
		pr.a.Post(SendWR{ID: uint64(10 + k), Op: OpSend, Stream: uint16(k), Local: SGE{src, uint64(200 + k*100), 100}})
	}
	n.run(20*time.Microsecond, func() bool { return false })
	drop.Port, pr.b.ep.port = pr.b.ep.port, drop
	drop.match = func(p *proto.Packet) bool { return p.Type() == proto.TypeAck && p.Ack().CreditStream() == 1 }
	drop.limit = 1 // the first ACK naming stream 1 is lost
	pr.b.PostRecv(RecvWR{ID: 3, Stream: 1, Local: SGE{inbox, 300, 100}})
	pr.b.PostRecv(RecvWR{ID: 2, Stream: 0, Local: SGE{inbox, 200, 100}})
	if !n.run(100*time.Millisecond, func() bool { return len(pr.rb.done) == 4 }) {
		t.Fatalf("%d of 4 SENDs landed: %+v", len(pr.rb.done), pr.a.SenderStats())
	}
	if drop.dropped != 1 || !bytes.Equal(inbox.Bytes(), src.Bytes()) {
		t.Fatalf("%d ACKs dropped; data equal %v", drop.dropped, bytes.Equal(inbox.Bytes(), src.Bytes()))
	}
	if o := pr.a.SenderStats().CreditOverdraws; o != 0 {
		t.Errorf("%d overdraws: stream 1 waited out the credit wait, its name was not sent again", o)
	}
}
