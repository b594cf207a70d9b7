package software

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// openAuthUDP opens a host on addr in the authenticated mode with cred,
// its datagrams shown to tap.
func openAuthUDP(t *testing.T, addr string, cred *auth.Credentials, tap Tap) *UDPHost {
	t.Helper()
	return openUDPWith(t, []string{addr}, 4, UDPOptions{Streams: 4, NoProgress: 10 * time.Second, Auth: cred, Tap: tap})
}

// forger sends datagrams from one address, as a party on the path can.
func forger(t *testing.T, from string) func(to netip.AddrPort, b []byte) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(from), 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func(to netip.AddrPort, b []byte) {
		if _, err := conn.WriteToUDPAddrPort(b, to); err != nil {
			t.Fatal(err)
		}
	}
}

// Over real sockets on loopback, in the authenticated mode, a party that
// sends from the peers' own addresses can make nothing happen while a
// WRITE is under way: a CLOSE, an ACK and a SEND it makes, in the clear or
// with a tag of its own, a real ACK and data packet sent again, and a data
// packet with a byte changed are dropped and counted, and the WRITE
// completes and verifies.
func TestAuthenticatedOverUDP(t *testing.T) {
	psk := bytes.Repeat([]byte{0x42}, auth.PSKLen)
	var mu sync.Mutex
	var data, ack []byte // a data packet the server received, an ACK it sent
	tap := func(d *link.Datagram, sent bool) {
		b := d.Data
		if len(b) < proto.MinProtectedLen || !proto.CommonHeader(b).Protected() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch typ := proto.Type(b[1]); {
		case !sent && typ == proto.TypeWrite && data == nil:
			data = bytes.Clone(b)
		case sent && typ == proto.TypeAck && ack == nil:
			ack = bytes.Clone(b)
		}
	}
	server := openAuthUDP(t, "127.0.0.71", &auth.Credentials{Method: auth.MethodPSK, PSK: psk}, tap)
	client := openAuthUDP(t, "127.0.0.72", &auth.Credentials{Method: auth.MethodPSK, PSK: psk, Suite: auth.ChaCha20Poly1305}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sdev, cdev := server.Device(), client.Device()
	spd, _ := sdev.AllocPD()
	cpd, _ := cdev.AllocPD()
	scq, ccq := sdev.CreateCQ(64), cdev.CreateCQ(64)
	lis, err := spd.Listen(scq, scq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := cpd.Connect(ctx, server.Remote(), ccq, ccq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sqp, err := lis.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	src, _ := cpd.RegisterMR(bytes.Repeat([]byte("authentic"), size/9+1)[:size], endpoint.LocalWrite)
	dst, _ := sqp.RegisterMR(make([]byte, size), endpoint.LocalWrite|endpoint.RemoteWrite)
	inbox, _ := spd.RegisterMR(make([]byte, 64), endpoint.LocalWrite)
	if err := sqp.PostRecv(5, 0, inbox.SGE(0, 64)); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostWrite(1, 1, src.SGE(0, size), dst.RKey(), 0); err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		seen := data != nil && ack != nil
		mu.Unlock()
		if seen {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no data packet and ACK seen")
		}
		time.Sleep(time.Millisecond)
	}
	sconn, cconn := sqp.Handle().(*engine.Conn), qp.Handle().(*engine.Conn)
	toServer := netip.AddrPortFrom(server.Remote().Planes[0], server.Remote().Port)
	toClient := netip.AddrPortFrom(client.Remote().Planes[0], client.Remote().Port)
	fromClient, fromServer := forger(t, "127.0.0.72"), forger(t, "127.0.0.71")
	control := func(typ proto.Type, dstID uint32, payload int, fill func(*proto.Packet)) (clear, tagged []byte) {
		var p proto.Packet
		if err := proto.Build(&p, make([]byte, 256), typ, 0, payload); err != nil {
			t.Fatal(err)
		}
		p.Common.SetDstConnID(dstID)
		fill(&p)
		clear = bytes.Clone(p.Seal())
		tagged = append(bytes.Clone(clear), make([]byte, proto.TagLen-proto.TrailerLen)...)
		tagged[0] |= 0x08
		return clear, tagged
	}
	var serverID, clientID uint32
	server.Backend().Runner().Do(func() { serverID = sconn.ID() })
	client.Backend().Runner().Do(func() { clientID = cconn.ID() })
	sendC, sendT := control(proto.TypeSend, serverID, 8, func(p *proto.Packet) { p.Send().SetMsgLen(8); copy(p.Payload, "HIJACKED") })
	closeC, _ := control(proto.TypeClose, clientID, 0, func(p *proto.Packet) { p.Close().SetReason(proto.CloseFatal) })
	nackC, _ := control(proto.TypeNack, clientID, 0, func(p *proto.Packet) { p.Nack().SetCode(proto.NackBadKey) })
	_, ackT := control(proto.TypeAck, clientID, 0, func(p *proto.Packet) { p.Ack().SetCumDSN(1 << 31) })
	mu.Lock()
	replayData, replayAck := bytes.Clone(data), bytes.Clone(ack)
	mu.Unlock()
	fromClient(toServer, sendC)
	fromClient(toServer, sendT)
	fromClient(toServer, replayData)
	changed := 0
	for i := 3; i < len(replayData); i += len(replayData) / 5 {
		b := bytes.Clone(replayData)
		b[i] ^= 0x01
		fromClient(toServer, b)
		changed++
	}
	fromServer(toClient, closeC)
	fromServer(toClient, nackC)
	fromServer(toClient, ackT)
	fromServer(toClient, replayAck)

	out := make([]endpoint.Completion, 1)
	if k, err := ccq.Wait(ctx, out); err != nil || k != 1 || out[0].Status != endpoint.StatusOK {
		t.Fatalf("the WRITE: %v %+v", err, out[:k])
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) || bytes.Contains(inbox.Bytes(), []byte("HIJACKED")) || scq.Len() != 0 {
		t.Fatal("the WRITE arrived with other bytes, or the forged SEND was received")
	}
	// The forgeries went out early in the WRITE; on a busy machine the last
	// may be read after it completes.
	var ss, cs engine.EndpointStats
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		server.Backend().Runner().Do(func() { ss = server.Backend().Endpoint().Stats() })
		client.Backend().Runner().Do(func() { cs = client.Backend().Endpoint().Stats() })
		if ss.Decode[proto.ErrAuthFailed] >= uint64(1+changed) && cs.Replays >= 1 && cs.Decode[proto.ErrAuthFailed] >= 1 {
			break
		}
	}
	if ss.Unprotected != 1 || ss.Decode[proto.ErrAuthFailed] != uint64(1+changed) {
		t.Errorf("server: %d dropped in the clear (want 1), %d failed to open (want %d)", ss.Unprotected, ss.Decode[proto.ErrAuthFailed], 1+changed)
	}
	if cs.Unprotected != 2 || cs.Decode[proto.ErrAuthFailed] != 1 || cs.Replays != 1 {
		t.Errorf("client: %d dropped in the clear (want 2), %d failed to open, %d replays (want 1 each)", cs.Unprotected, cs.Decode[proto.ErrAuthFailed], cs.Replays)
	}
	// A second client of the same listener, holding the first's key: its
	// WRITE is refused, and the region keeps the first's data.
	other, err := cpd.Connect(ctx, server.Remote(), ccq, ccq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lis.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	hijack, _ := cpd.RegisterMR(bytes.Repeat([]byte("HIJACKED"), 512), endpoint.LocalWrite)
	if err := other.PostWrite(2, 1, hijack.SGE(0, 4096), dst.RKey(), 0); err != nil {
		t.Fatal(err)
	}
	if k, err := ccq.Wait(ctx, out); err != nil || k != 1 || out[0].ID != 2 || out[0].Status != endpoint.StatusRemoteAccess {
		t.Fatalf("a WRITE with another connection's key: %v %+v", err, out[:k])
	}
	if !bytes.Equal(src.Bytes()[:4096], dst.Bytes()[:4096]) {
		t.Fatal("another connection's WRITE reached the region")
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
}
