package engine

import (
	"bytes"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// TestRNRStormDoesNotOverrunThePathRing checks that refused packets, which
// leave holes in a path's ring behind an unresolved oldest PSN, never make
// the path issue PSNs that would reuse that PSN's slot. The lost WRITE is
// still resent, and every message completes.
func TestRNRStormDoesNotOverrunThePathRing(t *testing.T) {
	drop := &dropPort{match: isFirstPacketOf(0, 0), limit: 1}
	n := newNetWithDrop(t, twoHostFabric(1), Config{Paths: 1, Streams: 2, NoCredits: true}, drop) // refusals, not credits
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 4096, 3, memreg.LocalWrite)
	dst := pr.hb.region(t, 4096, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Stream: 0, Local: SGE{src, 0, 4096}, RKey: dst.Key()})
	const sends = 300
	for i := 0; i < sends; i++ {
		pr.a.Post(SendWR{ID: uint64(100 + i), Op: OpSend, Stream: 1, Local: SGE{src, uint64(i), 1}})
	}
	n.run(5*time.Millisecond, func() bool { return false }) // an RNR storm, with no receives posted yet
	inbox := pr.hb.region(t, sends, 0, memreg.LocalWrite)
	for i := 0; i < sends; i++ {
		pr.b.PostRecv(RecvWR{ID: uint64(i), Stream: 1, Local: SGE{inbox, uint64(i), 1}})
	}
	if !n.run(time.Second, func() bool { return len(pr.ra.done) == sends+1 }) {
		t.Fatalf("%d of %d completions; %v; %+v", len(pr.ra.done), sends+1, pr.a.Err(), pr.a.SenderStats())
	}
	for _, wc := range pr.ra.done {
		if wc.Status != StatusOK {
			t.Fatalf("completion %+v", wc)
		}
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) || !bytes.Equal(inbox.Bytes(), src.Bytes()[:sends]) {
		t.Fatal("data differs")
	}
	if p := pr.a.snd.paths[0]; p.inflight != 0 || p.next-p.oldest != 0 {
		t.Fatalf("path left with %d in flight, %d unresolved PSNs", p.inflight, p.next-p.oldest)
	}
}

// TestCloseReportsEveryMessageOnce closes a connection with a message
// acknowledged in full behind an earlier one that is not. The later message
// completes ok and the earlier one is flushed. Every message gets exactly
// one completion.
func TestCloseReportsEveryMessageOnce(t *testing.T) {
	drop := &dropPort{match: func(p *proto.Packet) bool { return p.Type() == proto.TypeWrite && p.Write().MSN() == 0 }, limit: 1 << 30}
	n := newNetWithDrop(t, twoHostFabric(1), Config{Paths: 2, Streams: 1}, drop)
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 8192, 3, memreg.LocalWrite)
	dst := pr.hb.region(t, 8192, 0, memreg.LocalWrite|memreg.RemoteWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, 4096}, RKey: dst.Key()})
	pr.a.Post(SendWR{ID: 2, Op: OpWrite, Local: SGE{src, 4096, 4096}, RKey: dst.Key(), RemoteOffset: 4096})
	n.run(50*time.Microsecond, func() bool { return false })
	pr.a.Close()
	got := map[uint64]Status{}
	for _, wc := range pr.ra.done {
		if _, twice := got[wc.ID]; twice {
			t.Fatalf("message %d completed twice", wc.ID)
		}
		got[wc.ID] = wc.Status
	}
	if len(got) != 2 || got[1] != StatusFlushed || got[2] != StatusOK {
		t.Fatalf("completions %v: want 1 flushed, 2 ok", got)
	}
}

// TestRepathAwayFromDeadRoute black-holes one source port's route. The path
// times out, goes ASSUMED_BAD, is repathed to another port, and carries
// data again.
func TestRepathAwayFromDeadRoute(t *testing.T) {
	n, pr := writeOverDeadRoute(t, 1)
	p0 := pr.a.Telemetry()[0]
	if p0.Repaths == 0 || p0.SrcPort == deadPort || p0.Timeouts == 0 {
		t.Fatalf("path 0: %+v", p0)
	}
	// After the repath, path 0 carries data again.
	before := p0.PacketsSent
	x2 := &xfer{op: OpWrite, size: 1 << 20, streams: 1}
	pr.ra.done = nil
	x2.start(t, pr)
	n.run(time.Second, func() bool { return x2.finished(pr) })
	if after := pr.a.Telemetry()[0]; after.PacketsSent == before || after.State.String() != "GOOD" {
		t.Fatalf("path 0 after repath: %+v", after)
	}
}

// portFilter drops the datagrams drop selects.
type portFilter struct {
	link.Port
	drop func(*link.Datagram) bool
}

func (f *portFilter) Send(batch []link.Datagram) {
	kept := batch[:0]
	for _, d := range batch {
		if !f.drop(&d) {
			kept = append(kept, d)
		}
	}
	f.Port.Send(kept)
}

// TestConnectFloodIsCapped checks that a flood of CONNECTs from forged
// sources cannot grow the acceptor's state beyond MaxAccepting. The rest
// are refused with CLOSE RESOURCE. Address validation is off, which would
// stop them at RetryAt (TestConnectFloodIsValidated).
func TestConnectFloodIsCapped(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{MaxAccepting: 16, RetryAt: RetryNever})
	acc := n.hosts[1].ep
	acc.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	for i := 0; i < 500; i++ {
		var pkt proto.Packet
		buf := make([]byte, 200)
		proto.Build(&pkt, buf, proto.TypeConnect, 0, 0)
		h := pkt.Handshake()
		h.SetSrcConnID(uint32(1000 + i))
		h.SetDSNWindow(1 << 30)
		h.SetMaxPacket(9000)
		h.SetPaths(256)
		h.SetStreams(65535)
		h.SetReplyPort(4797)
		h.SetInboundCapacity(proto.CapacityUnknown)
		d := link.Datagram{Src: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 5000),
			Dst: netip.AddrPortFrom(netem.Addr(0, 1), 4797), Data: pkt.Seal()}
		acc.Receive(&d, n.sim.Now())
	}
	if len(acc.conns) != 16 || acc.Stats().Refused != 500-16 {
		t.Fatalf("%d connections, %d refused", len(acc.conns), acc.Stats().Refused)
	}
}

// TestCloseIsResentAndIdQuarantined checks that a lost CLOSE is resent, and
// that once the connection is closed its id is quarantined.
func TestCloseIsResentAndIdQuarantined(t *testing.T) {
	drop := &dropPort{match: func(p *proto.Packet) bool { return p.Type() == proto.TypeClose }, limit: 1}
	n := newNetWithDrop(t, twoHostFabric(1), Config{}, drop)
	pr := n.connect(0, 1)
	pr.a.Close()
	if !n.run(time.Second, func() bool { return pr.b.State() == Closed }) {
		t.Fatal("the peer never learned of the close")
	}
	if drop.dropped != 1 || pr.b.Err() != ErrClosed {
		t.Fatalf("dropped %d CLOSEs; peer error %v", drop.dropped, pr.b.Err())
	}
	// A late data packet for the closed id is dropped as quarantined.
	var pkt proto.Packet
	proto.Build(&pkt, make([]byte, 200), proto.TypeWrite, 0, 0)
	pkt.Common.SetDstConnID(pr.a.ID())
	d := link.Datagram{Src: netip.AddrPortFrom(netem.Addr(0, 1), 1), Dst: netip.AddrPortFrom(netem.Addr(0, 0), 4797), Data: pkt.Seal()}
	q := n.hosts[0].ep.Stats().Quarantined
	n.hosts[0].ep.Receive(&d, n.sim.Now())
	if n.hosts[0].ep.Stats().Quarantined != q+1 {
		t.Fatal("a packet for a just-closed id was not counted as quarantined")
	}
}

// TestPostingDoesNotDefeatTheNoProgressTimeout checks that posting more and
// more work to a vanished peer does not keep the connection alive. It still
// fails after NoProgress.
func TestPostingDoesNotDefeatTheNoProgressTimeout(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{NoProgress: 10 * time.Millisecond})
	pr := n.connect(0, 1)
	n.fab.Host(1).Attach(nil)
	src := pr.ha.region(t, 100, 1, memreg.LocalWrite)
	start := n.sim.Now()
	for i := 0; i < 100 && pr.a.State() != Closed; i++ {
		pr.a.Post(SendWR{ID: uint64(i), Op: OpWrite, Local: SGE{src, 0, 100}, RKey: 1})
		n.run(time.Millisecond, func() bool { return false })
	}
	if pr.a.State() != Closed || pr.a.Err() != ErrTimeout || n.sim.Now().Sub(start) > 12*time.Millisecond {
		t.Fatalf("state %v (%v) after %v", pr.a.State(), pr.a.Err(), n.sim.Now().Sub(start))
	}
}

// TestRNRBacksOff checks that a receiver that is not ready is retried with
// back-off. The wait doubles with each refusal of the same message, so a
// long stall costs a handful of NACKs, not one per RetryAfter. When the
// receive comes, the SEND lands.
func TestRNRBacksOff(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 1, NoCredits: true})
	pr := n.connect(0, 1)
	src := pr.ha.region(t, 100, 1, memreg.LocalWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpSend, Local: SGE{src, 0, 100}})
	n.run(10*time.Millisecond, func() bool { return false })
	rnr := pr.b.ReceiverStats().Nacks[proto.NackRNR]
	// Waits of 100 µs times 1, 2, 4 and so on up to 64 make about 8
	// refusals in 10 ms.
	if rnr < 5 || rnr > 10 {
		t.Fatalf("%d RNR NACKs in 10 ms", rnr)
	}
	dst := pr.hb.region(t, 100, 0, memreg.LocalWrite)
	pr.b.PostRecv(RecvWR{ID: 9, Local: SGE{dst, 0, 100}})
	if !n.run(20*time.Millisecond, func() bool { return len(pr.rb.done) == 1 }) || !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("the SEND never landed")
	}
}

// TestPathTimersWaitForTheGrantedDrain checks that a path's tail probe and
// retransmission timeout wait, beyond the RTT, for the connection's packets
// in flight to drain at the rate the receiver granted. With 25 packets of
// 4,000 bytes of payload in flight and a hint of 10^8 bytes of payload a
// second, that is one millisecond. Without a hint the usual rule of 2 SRTT
// stands, with RTOMin as its floor. A hostile hint of one byte a second
// cannot stretch the timers past RTOMax.
func TestPathTimersWaitForTheGrantedDrain(t *testing.T) {
	s, p, cfg := timedPath(t)
	for range 25 {
		p.took(&sendRec{}) // in flight on the path, and so in the connection
	}

	s.hint = math.Inf(1)
	if got, want := p.timeout(), max(2*p.RTT.SRTT+cfg.AckDelay, cfg.RTOMin); got != want { // without a hint, the timeout's floor
		t.Errorf("no hint: tail probe after %v, want %v", got, want)
	}
	s.hint = 1e8
	if got, want := p.timeout(), p.RTT.SRTT+time.Millisecond+cfg.AckDelay; got != want {
		t.Errorf("hint 10^8 B/s: tail probe after %v, want %v", got, want)
	}
	p.probed = true // the probe went, so next is the retransmission timeout
	if got, want := p.timeout(), p.RTT.SRTT+time.Millisecond; got != want {
		t.Errorf("hint 10^8 B/s: timeout after %v, want %v", got, want)
	}
	s.hint = 1
	if got := p.timeout(); got > cfg.RTOMax {
		t.Errorf("hint 1 B/s: timeout after %v, past RTOMax %v", got, cfg.RTOMax)
	}
	p.probed = false
	if got, want := p.timeout(), cfg.RTOMax; got != want {
		t.Errorf("hint 1 B/s: tail probe after %v, want RTOMax %v", got, want)
	}
}

// TestBaselineLocalAckTimeoutIsFixed checks that a baseline connection with
// a LocalAckTimeout waits exactly that long, whatever its RTT and however
// many timeouts came before, as RoCEv2's local ACK timer does. Without one
// it uses the adaptive RTO, doubled for each timeout in a row.
func TestBaselineLocalAckTimeoutIsFixed(t *testing.T) {
	const fixed = 16384 * time.Nanosecond
	for _, lat := range []time.Duration{fixed, 0} {
		n := newNet(t, twoHostFabric(1), Config{Paths: 1, Streams: 1, Mode: proto.ModeBaseline, LocalAckTimeout: lat})
		pr := n.connect(0, 1)
		pr.a.snd.equip()
		p := pr.a.snd.paths[0]
		p.RTT = pathmgr.RTT{SRTT: 40 * time.Microsecond, RTTVar: 10 * time.Microsecond, Min: 30 * time.Microsecond, Samples: 5}
		p.timeouts = 2
		want := fixed
		if lat == 0 {
			want = 4 * (40*time.Microsecond + 4*10*time.Microsecond)
		}
		if got := p.timeout(); got != want {
			t.Errorf("LocalAckTimeout %v: the timer waits %v, want %v", lat, got, want)
		}
	}
}

// TestRNRHoldsTheStream checks a stream whose receiver refused a packet
// with RNR because no receive is posted. The stream sends no new data until
// a refused packet is accepted, since the new data would be refused too. It
// retries one refused packet at a time. So a SEND of 64 packets to a
// receiver with nothing posted costs the first window and that one packet's
// backed-off retries, 100 µs times 1, 2, 4 and 8, which is 4 in 2 ms. It
// does not cost every packet in every round. When the receive comes, the
// SEND lands.
func TestRNRHoldsTheStream(t *testing.T) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 4, Streams: 1, NoCredits: true})
	pr := n.connect(0, 1)
	const size = 64 * 4000
	src := pr.ha.region(t, size, 1, memreg.LocalWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpSend, Local: SGE{src, 0, size}})
	n.run(2*time.Millisecond, func() bool { return false })
	rnr := pr.b.ReceiverStats().Nacks[proto.NackRNR]
	st := pr.a.SenderStats()
	fresh := st.Packets - st.Retransmits
	// The first window of 16 packets goes before the first refusal comes
	// back. Then only those packets are retried, each at its own backed-off
	// time.
	if fresh > 16 || rnr > fresh+5 {
		t.Fatalf("%d new packets sent and %d refused in 2 ms with no receive posted: the stream did not wait", fresh, rnr)
	}
	dst := pr.hb.region(t, size, 0, memreg.LocalWrite)
	pr.b.PostRecv(RecvWR{ID: 9, Local: SGE{dst, 0, size}})
	if !n.run(50*time.Millisecond, func() bool { return len(pr.rb.done) == 1 }) || !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("the SEND never landed")
	}
}

// TestRNRRetriesTheOldestRefusal checks refusals that come back out of
// order, because one plane is much slower than the other. The stream must
// not keep retrying a later message's packet while the earlier message,
// whose receive the application posts first, waits. A one-packet SEND goes
// on the slow plane's path, then a longer one, and both are refused.
// Receives are then posted one at a time, each after the SEND before it
// completed. Both SENDs land.
func TestRNRRetriesTheOldestRefusal(t *testing.T) {
	fc := twoHostFabric(2)
	slow := link100()
	slow.Delay = 200 * time.Microsecond // the receiver's NACKs on plane 0 come back late
	fc.Overrides = append(fc.Overrides, netem.Override{Plane: 0, Match: netem.LinkMatch{Kind: netem.Uplink, Host: 1, Leaf: -1, Spine: -1}, Link: slow})
	n := newNet(t, fc, Config{Paths: 4, Streams: 1, NoCredits: true})
	pr := n.connect(0, 1)
	const first, second = 100, 8 * 4000
	src := pr.ha.region(t, first+second, 1, memreg.LocalWrite)
	pr.a.Post(SendWR{ID: 1, Op: OpSend, Local: SGE{src, 0, first}})
	pr.a.Post(SendWR{ID: 2, Op: OpSend, Local: SGE{src, first, second}})
	n.run(3*time.Millisecond, func() bool { return false })
	dst := pr.hb.region(t, first+second, 0, memreg.LocalWrite)
	for i, r := range []SGE{{dst, 0, first}, {dst, first, second}} {
		pr.b.PostRecv(RecvWR{ID: uint64(10 + i), Local: r})
		if !n.run(50*time.Millisecond, func() bool { return len(pr.rb.done) == i+1 }) {
			t.Fatalf("SEND %d never landed once its receive was posted (completions %+v)", i+1, pr.rb.done)
		}
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("the SENDs landed wrong")
	}
}

// A path alone on its plane whose route dies moves to a new source port
// once a few probes went unanswered, since it cannot tell its route from
// its plane, and carries data again.
func TestLonePathMovesAwayFromDeadRoute(t *testing.T) {
	_, pr := writeOverDeadRoute(t, 2)
	if p0 := pr.a.Telemetry()[0]; p0.Repaths == 0 || p0.SrcPort == deadPort || p0.State.String() != "GOOD" {
		t.Fatalf("path 0, alone on plane 0: %+v", p0)
	}
}

// deadPort is path 0's first source port, whose route writeOverDeadRoute
// kills.
const deadPort = uint16(49152)

// writeOverDeadRoute connects two hosts over planes planes with 2 paths,
// kills the route of path 0's first source port, data and probes alike,
// and WRITEs 4 MiB. It returns once the WRITE arrived whole and path 0 is
// GOOD again, or 50 ms later.
func writeOverDeadRoute(t *testing.T, planes int) (*testNet, *pair) {
	t.Helper()
	n := newNet(t, twoHostFabric(planes), Config{Paths: 2, Streams: 1, MPL: time.Millisecond})
	pr := n.connect(0, 1)
	n.hosts[0].ep.port = &portFilter{Port: n.fab.Host(0), drop: func(d *link.Datagram) bool {
		t := proto.Type(d.Data[1])
		return d.Src.Port() == deadPort && (t.IsData() || t == proto.TypeProbe)
	}}
	x := &xfer{op: OpWrite, size: 4 << 20, streams: 1}
	x.start(t, pr)
	if !n.run(2*time.Second, func() bool { return x.finished(pr) || pr.a.State() == Closed }) || pr.a.State() == Closed {
		t.Fatalf("not finished: %v %+v", pr.a.Err(), pr.a.Telemetry())
	}
	x.check(t, pr)
	n.run(50*time.Millisecond, func() bool { return pr.a.Telemetry()[0].State.String() == "GOOD" })
	return n, pr
}

// TestProbeAfterAFirstBDPWaitsForThePacketsAhead checks that, after a
// first window of one BDP, a path's tail probe waits for the drain of the
// packets sent before its oldest only, and its timeout still for all.
func TestProbeAfterAFirstBDPWaitsForThePacketsAhead(t *testing.T) {
	s, p, cfg := timedPath(t)
	s.hint, s.first = 1e8, 150
	for range 100 {
		s.paths[1].took(&sendRec{}) // the rest of the first window, on the other path
	}
	*p.slot(p.next) = sendRec{psn: p.next, dsn: s.una + 25} // 25 DSNs went before it
	p.next++
	p.took(&sendRec{})
	if got, want := p.timeout(), p.RTT.SRTT+s.drainFor(25)+cfg.AckDelay; got != want {
		t.Errorf("tail probe after %v, want %v: the drain of the 25 packets ahead", got, want)
	}
	p.probed = true
	if got, want := p.timeout(), p.RTT.SRTT+s.drainFor(101); got != want {
		t.Errorf("timeout after %v, want %v: the drain of all 101 in flight", got, want)
	}
}

// timedPath is the sender of an established two-path connection and its
// path 0, given an RTT of 10 µs and packets of 4,000 bytes of payload, for
// tests of the timers.
func timedPath(t *testing.T) (*sender, *sendPath, Config) {
	n := newNet(t, twoHostFabric(1), Config{Paths: 2, Streams: 1})
	pr := n.connect(0, 1)
	s := &pr.a.snd
	s.equip()
	p := s.paths[0]
	p.RTT = pathmgr.RTT{SRTT: 10 * time.Microsecond, RTTVar: 2 * time.Microsecond, Min: 10 * time.Microsecond, Samples: 3}
	s.mss = 4000
	p.rateChanged()
	return s, p, pr.a.ep.cfg
}

// TestGrantOpensWhenTheShareRises checks that a connection's windows may
// grow by grant only for a few round trips after its receiver's hint rose,
// and while the hint is above what they carry: a steady share, however far
// above the windows, opens nothing.
func TestGrantOpensWhenTheShareRises(t *testing.T) {
	s, p, _ := timedPath(t)
	tp := s.c.tp
	tp.hint(s, 1e6)
	if s.granted() {
		t.Fatal("a first hint, never risen, granted growth")
	}
	tp.hint(s, 1e12) // far above the windows' rate
	if !s.granted() {
		t.Fatal("a share that rose above the windows granted nothing")
	}
	later := s.c.ep.clock.Now().Add(grantRounds*p.RTT.Min + 1)
	if s.grantUntil >= later {
		t.Fatalf("the grant lasts until %v, past %d least round trips", s.grantUntil, grantRounds)
	}
	tp.hint(s, 1e12)
	s.grantUntil = 0 // as once it has run out
	if s.granted() {
		t.Error("a share that stayed as it was granted growth")
	}
}
