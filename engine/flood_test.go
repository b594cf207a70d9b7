package engine

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// TestConnectFloodAtRateStaysBounded floods an endpoint with 4,000
// CONNECTs a second for 5 s of virtual time, each from a fresh id and one
// of 64 forged addresses and never completed, while the endpoint serves a
// real connection: back-to-back WRITEs of 256 KiB over a 100 Mb/s link,
// the whole flood long. Its listener takes every connection, as an
// application that accepts the real one does, so the flood meets the
// engine's own bounds and nothing else. Sampled every 10 ms, the endpoint
// holds at most RetryAt handshakes half-open and never more connections,
// since the forged sources never return a token, and answers the rest
// with a RETRY that makes no state (spec section 8.1). It keeps at most
// RetryAt ids quarantined (spec section 8.5). They are swept when
// another connection ends, so those kept all ended within 2 MPL of the
// latest; handshakes that end within 2 MPL, less than the connect
// timeout, were all half-open at once. Once the last half-open handshake
// has timed out only the real connection is left, and every WRITE
// completed and arrived whole. TestConnectFloodIsCapped is the cap
// alone, in one instant.
func TestConnectFloodAtRateStaysBounded(t *testing.T) {
	const (
		rate     = 4000
		floodFor = 5 * time.Second
		size     = 256 << 10
	)
	l := netem.LinkConfig{Rate: 100e6, Delay: 10 * time.Microsecond}
	n := newNet(t, netem.Config{Seed: 1, Hosts: 2, Planes: 1, Uplink: l, Downlink: l}, Config{Paths: 8, Streams: 2})
	pr := n.connect(0, 1)
	acc := n.hosts[1].ep
	acc.Listen(n.hosts[1].pd, func(*Conn) (Events, bool) { return &recorder{}, true })
	limit := acc.Config().RetryAt

	start := n.sim.Now()
	flooding := func() bool { return n.sim.Now().Sub(start) < floodFor }
	sent := 0
	var pkt proto.Packet
	var inject clock.Timer
	inject = n.sim.NewTimer(func() {
		for due := int(n.sim.Now().Sub(start) * rate / time.Second); sent < due; sent++ {
			proto.Build(&pkt, make([]byte, 200), proto.TypeConnect, 0, 0)
			h := pkt.Handshake()
			h.SetSrcConnID(acc.random32() | 1)
			h.SetDSNWindow(4096)
			h.SetMaxPacket(4160)
			h.SetPaths(8)
			h.SetStreams(2)
			h.SetReplyPort(proto.DefaultPort)
			h.SetInboundCapacity(proto.CapacityUnknown)
			src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, 0, byte(sent % 64)}), 49152)
			d := link.Datagram{Src: src, Dst: netip.AddrPortFrom(netem.Addr(0, 1), proto.DefaultPort), Data: pkt.Seal()}
			acc.Receive(&d, n.sim.Now())
		}
		if flooding() {
			inject.Reset(n.sim.Now().Add(time.Millisecond))
		}
	})
	inject.Reset(start)

	var most struct{ accepting, conns, accepted, closed, closedKey int }
	var sample clock.Timer
	sample = n.sim.NewTimer(func() {
		most.accepting = max(most.accepting, acc.accepting)
		most.conns = max(most.conns, len(acc.conns))
		most.accepted = max(most.accepted, len(acc.accepted))
		most.closed = max(most.closed, len(acc.closed))
		most.closedKey = max(most.closedKey, len(acc.closedKey))
		sample.Reset(n.sim.Now().Add(10 * time.Millisecond))
	})
	sample.Reset(start)

	src := pr.ha.region(t, 4*size, 1, memreg.LocalWrite)
	dst := pr.hb.region(t, 4*size, 0, memreg.LocalWrite|memreg.RemoteWrite)
	writes := 0
	for flooding() {
		off := uint64(writes%4) * size
		if err := pr.a.Post(SendWR{ID: uint64(writes), Op: OpWrite, Local: SGE{src, off, size}, RKey: dst.Key(), RemoteOffset: off}); err != nil {
			t.Fatal(err)
		}
		writes++
		if !n.run(time.Second, func() bool { return len(pr.ra.done) == writes }) {
			t.Fatalf("WRITE %d did not complete within a second of the flood; the connection is %v (%v)", writes, pr.a.State(), pr.a.Err())
		}
		if wc := pr.ra.done[writes-1]; wc.Status != StatusOK {
			t.Fatalf("WRITE %d: %+v", writes, wc)
		}
	}
	n.run(acc.Config().ConnectTimeout+2*acc.Config().MPL+10*time.Millisecond, func() bool { return false })
	sample.Stop()

	t.Logf("%d CONNECTs in %v, %d RETRYs; at most %d half-open, %d connections, %d answered, %d and %d quarantined; %d WRITEs",
		sent, floodFor, acc.Stats().RetriesSent, most.accepting, most.conns, most.accepted, most.closed, most.closedKey, writes)
	if sent < rate*int(floodFor/time.Second)-rate/100 || acc.Stats().RetriesSent == 0 {
		t.Fatalf("the flood: %d CONNECTs, %d RETRYs", sent, acc.Stats().RetriesSent)
	}
	if most.accepting > limit || most.conns > limit+1 || most.accepted > limit+1 {
		t.Errorf("during the flood: %d half-open, %d connections, %d CONNECTs answered; want at most %d, %d and %d",
			most.accepting, most.conns, most.accepted, limit, limit+1, limit+1)
	}
	if most.closed > limit || most.closedKey > limit {
		t.Errorf("during the flood: %d ids and %d CONNECTs quarantined, want at most %d", most.closed, most.closedKey, limit)
	}
	if acc.accepting != 0 || len(acc.conns) != 1 || len(acc.accepted) != 1 || pr.b.State() != Established {
		t.Errorf("after the flood: %d half-open, %d connections, %d answered, the real one %v; want 0, 1, 1 and established",
			acc.accepting, len(acc.conns), len(acc.accepted), pr.b.State())
	}
	if writes < 100 || !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Errorf("%d WRITEs; the data arrived whole: %v", writes, bytes.Equal(src.Bytes(), dst.Bytes()))
	}
}
