package engine

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// FuzzEngine runs two endpoints in virtual time beside a program of
// hostile packets the fuzzer writes: CRC-valid packets of every type,
// their fields chosen around a connection's live state, each delivered to
// one side of it as if from its peer or from a stranger. A legitimate
// WRITE runs beside them on another connection of the same two endpoints.
// After each step nothing outside a granted region may change, and a
// receive of the attacked connection that completed holds no more than
// was posted, every byte of it written. Once the program ends every
// connection must end idle or closed, and the legitimate WRITE, if it
// completed, must have arrived whole. The program
// knows every field of the connection it attacks, as a party on the path
// would, so that connection's own data is not held to arrive: only
// authentication could protect it.
func FuzzEngine(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 32, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 1, 0, 0, 0, 0, 0, 0, 3, 1, 0, 0, 0, 0, 0, 0, 6, 9, 1, 2, 3, 4, 5, 6})
	f.Fuzz(func(t *testing.T, program []byte) {
		const size = 4096
		n := newNet(t, twoHostFabric(1), Config{Paths: 2, Streams: 2, NoProgress: 20 * time.Millisecond})
		pr := n.connect(0, 1)
		all, target := guarded(t, pr.hb, size, memreg.LocalWrite|memreg.RemoteWrite|memreg.RemoteRead)
		recvBuf := pr.hb.region(t, size, 0, memreg.LocalWrite)
		for i := range recvBuf.Bytes() {
			recvBuf.Bytes()[i] = unwritten
		}
		pr.b.PostRecv(RecvWR{ID: 1, Stream: 0, Local: SGE{recvBuf, 0, size}})
		pr.a.snd.equip()
		legit := n.connect(0, 1)
		legitSrc := legit.ha.region(t, 64<<10, 3, memreg.LocalWrite)
		legitDst := legit.hb.region(t, 64<<10, 0, memreg.LocalWrite|memreg.RemoteWrite)
		legit.a.Post(SendWR{ID: 9, Op: OpWrite, Stream: 1, Local: SGE{legitSrc, 0, 64 << 10}, RKey: legitDst.Key()})

		for len(program) >= 8 {
			step := program[:8]
			program = program[8:]
			hostile(n, pr, target, step)
			n.run(5*time.Microsecond, func() bool { return false })
			guards(t, all, size)
			receivesWhole(t, pr.rb.done, recvBuf.Bytes())
		}
		idle := func(c *Conn) bool { return c.State() == Closed || !c.snd.busy() }
		conns := []*Conn{pr.a, pr.b, legit.a, legit.b}
		n.run(time.Second, func() bool {
			for _, c := range conns {
				if !idle(c) {
					return false
				}
			}
			return true
		})
		for i, c := range conns {
			if !idle(c) {
				t.Fatalf("connection %d: work still outstanding a second after the program (%v)", i, c.State())
			}
		}
		for _, wc := range legit.ra.done {
			if wc.Status == StatusOK && digest(legitSrc.Bytes()) != digest(legitDst.Bytes()) {
				t.Fatal("the legitimate WRITE completed, and its data differs")
			}
		}
		guards(t, all, size)
	})
}

// unwritten fills the attacked connection's receive buffer. No packet of
// the program carries it.
const unwritten = 0xA5

// receivesWhole fails unless each receive that completed into buf holds
// no more than buf and has every byte written (spec section 6.5).
func receivesWhole(t *testing.T, done []Completion, buf []byte) {
	t.Helper()
	for _, wc := range done {
		if wc.Op != OpRecv || wc.Status != StatusOK || wc.HasImm {
			continue
		}
		if int(wc.Bytes) > len(buf) {
			t.Fatalf("a receive of %d bytes completed into %d", wc.Bytes, len(buf))
		}
		for i, b := range buf[:wc.Bytes] {
			if b == unwritten {
				t.Fatalf("a receive of %d bytes completed with byte %d never written", wc.Bytes, i)
			}
		}
	}
}

// guards fails unless the guard bytes on each side of a guarded region of
// size bytes are as guarded set them.
func guards(t *testing.T, all []byte, size int) {
	t.Helper()
	for i, b := range all {
		if (i < size || i >= 2*size) && b != 0xA5 {
			t.Fatalf("guard byte %d changed", i)
		}
	}
}

// hostile builds one packet from eight bytes of the program and delivers
// it. step[0] picks the type and the side it goes to; the rest pick
// fields near the live state: DSNs and PSNs a little before or after
// what is in flight, offsets and lengths around the target region's size,
// a valid key or not.
func hostile(n *testNet, pr *pair, target *memreg.Region, step []byte) {
	types := []proto.Type{proto.TypeWrite, proto.TypeWriteImm, proto.TypeSend, proto.TypeReadReq,
		proto.TypeReadResp, proto.TypeAck, proto.TypeNack, proto.TypeProbe, proto.TypeProbeReply, proto.TypeCNP}
	typ := types[int(step[0]>>1)%len(types)]
	to, from := 1, pr.a
	if step[0]&1 == 1 && !typ.IsData() {
		to, from = 0, pr.b
	}
	conn := []*Conn{pr.a, pr.b}[to]
	delta := uint32(int8(step[1]))
	off := uint32(binary.BigEndian.Uint16(step[2:4])) % 8192
	length := uint32(binary.BigEndian.Uint16(step[4:6])) % 8192
	payload := int(step[6]) * 16
	if !typ.HasPayload() {
		payload = 0
	}
	if payload > int(length) {
		payload = int(length)
	}
	if int(off)+payload > int(length) {
		off = length - uint32(payload)
	}
	records := 0
	if typ == proto.TypeAck {
		records = 1
	}
	var pkt proto.Packet
	if err := proto.Build(&pkt, make([]byte, proto.MaxPacketLen), typ, records, payload); err != nil {
		return
	}
	for i := range pkt.Payload {
		pkt.Payload[i] = ^byte(unwritten)
	}
	h := pkt.Common
	h.SetDstConnID(conn.ID())
	h.SetPathID(step[7] % 3)
	h.SetEpoch(step[7] >> 6)
	peer := &from.snd
	h.SetDSN(peer.nextDSN + delta)
	if len(peer.paths) > 0 {
		h.SetPSN(peer.paths[0].next + delta)
	}
	if step[7]&4 != 0 {
		h.SetFlags(proto.FlagAckRequest)
	}
	rkey := target.Key()
	if step[7]&8 != 0 {
		rkey ^= uint64(step[6]) + 1
	}
	switch typ {
	case proto.TypeWrite, proto.TypeWriteImm:
		w := pkt.Write()
		w.SetRKey(rkey)
		w.SetRemoteOffset(uint64(off))
		w.SetMsgLen(length)
		w.SetMsgOffset(off)
		w.SetStream(uint16(step[7] & 1))
		w.SetMSN(delta & 3)
	case proto.TypeSend:
		s := pkt.Send()
		s.SetMsgLen(length)
		s.SetMsgOffset(off)
		s.SetStream(uint16(step[7] & 1))
		s.SetMSN(delta & 3)
		s.SetRSN(delta & 1)
	case proto.TypeReadReq:
		r := pkt.ReadReq()
		r.SetRKey(rkey)
		r.SetRemoteOffset(uint64(off))
		r.SetMsgLen(length)
		r.SetMSN(delta & 3)
		r.SetReadTag(uint32(step[6]))
	case proto.TypeReadResp:
		r := pkt.ReadResp()
		r.SetReadTag(uint32(step[6]))
		r.SetMsgLen(length)
		r.SetMsgOffset(off)
	case proto.TypeAck:
		a := pkt.Ack()
		a.SetCumDSN(conn.snd.una + delta)
		rec := pkt.AckRecord(0)
		rec.SetPathID(step[7] % 3)
		if len(conn.snd.paths) > 0 {
			rec.SetHighestPSN(conn.snd.paths[0].next + delta)
		}
		rec.SetBitvector([32]byte{step[2], step[3], step[4], step[5]})
	case proto.TypeNack:
		nk := pkt.Nack()
		nk.SetCode(proto.NackCode(step[2] % 12))
		nk.SetDSN(conn.snd.una + delta)
		nk.SetRetryAfter(uint16(step[3]))
		if len(conn.snd.paths) > 0 {
			nk.SetPSN(conn.snd.paths[0].next + delta)
		}
	case proto.TypeProbe:
		pkt.Probe().SetProbeID(uint32(step[2]))
	case proto.TypeProbeReply:
		pkt.ProbeReply().SetProbeID(uint32(step[2]))
	}
	src := netem.Addr(0, 1-to)
	if step[7]&16 != 0 {
		src = netem.Addr(0, 5) // a stranger
	}
	d := link.Datagram{Src: netip.AddrPortFrom(src, 49152), Dst: netip.AddrPortFrom(netem.Addr(0, to), proto.DefaultPort),
		ECN: link.ECN(step[7] >> 6), Data: pkt.Seal()}
	n.hosts[to].ep.Receive(&d, n.sim.Now())
}
