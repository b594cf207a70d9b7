package auth

import (
	"bytes"
	"crypto/ecdh"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/proto"
)

// seeded is a deterministic random source for ephemeral keys.
type seeded struct{ r *rand.ChaCha8 }

func (s seeded) Read(p []byte) (int, error) { return s.r.Read(p) }

func newSeeded(seed byte) seeded { return seeded{rand.NewChaCha8([32]byte{seed})} }

func handshakeHeaders() (connect, accept proto.HandshakeHeader) {
	connect, accept = make(proto.HandshakeHeader, 44), make(proto.HandshakeHeader, 44)
	connect.SetSrcConnID(0x11223344)
	connect.SetPaths(8)
	connect.SetCapabilities(proto.CapAuth)
	accept.SetSrcConnID(0x55667788)
	accept.SetPaths(8)
	accept.SetCapabilities(proto.CapAuth)
	return connect, accept
}

func staticKey(t *testing.T, seed byte) *ecdh.PrivateKey {
	k, err := ecdh.X25519().GenerateKey(newSeeded(seed))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// credentials returns an initiator's and an acceptor's credentials of
// method m that admit each other.
func credentials(t *testing.T, m Method) (initiator, acceptor *Credentials) {
	if m == MethodPSK {
		psk := bytes.Repeat([]byte{7}, PSKLen)
		return &Credentials{Method: m, PSK: psk}, &Credentials{Method: m, PSK: psk}
	}
	si, sa := staticKey(t, 1), staticKey(t, 2)
	return &Credentials{Method: m, Static: si, Peers: []*ecdh.PublicKey{sa.PublicKey()}},
		&Credentials{Method: m, Static: sa, Peers: []*ecdh.PublicKey{staticKey(t, 3).PublicKey(), si.PublicKey()}}
}

// handshake runs both halves and returns each side's secrets, or the
// first error.
func handshake(ic, ac *Credentials, hsC, hsA proto.HandshakeHeader, tamper func(hello, accept []byte)) (is, as Secrets, err error) {
	in, err := Initiate(ic, newSeeded(10), hsC)
	if err != nil {
		return is, as, err
	}
	hello := bytes.Clone(in.Hello())
	if tamper != nil {
		tamper(hello, nil)
	}
	r, err := Respond(ac, newSeeded(11), hsC, proto.AuthHello(hello))
	if err != nil {
		return is, as, err
	}
	acc, as := r.Answer(hsA)
	acc = bytes.Clone(acc)
	if tamper != nil {
		tamper(nil, acc)
	}
	is, err = in.Finish(hsA, proto.AuthAccept(acc))
	return is, as, err
}

// Both methods agree on one secret per direction, and each side proves
// what it must: every byte of the key exchange, and every field of both
// handshake headers, is bound, so a change anywhere fails the handshake
// (spec section 13.3).
func TestHandshakeBindsEverything(t *testing.T) {
	for _, m := range []Method{MethodPSK, MethodKeys} {
		ic, ac := credentials(t, m)
		hsC, hsA := handshakeHeaders()
		is, as, err := handshake(ic, ac, hsC, hsA, nil)
		if err != nil || !bytes.Equal(is.Send, as.Recv) || !bytes.Equal(is.Recv, as.Send) || bytes.Equal(is.Send, is.Recv) {
			t.Fatalf("%v: %v; secrets %x/%x and %x/%x", m, err, is.Send, is.Recv, as.Send, as.Recv)
		}
		for i := 2; i < proto.AuthHelloLen; i++ { // Suite and Method are refused, not failed: below
			if m == MethodPSK && i >= 36 && i < 84 {
				continue // Static is zero and ignored with a pre-shared key
			}
			_, _, err := handshake(ic, ac, hsC, hsA, func(hello, _ []byte) {
				if hello != nil {
					hello[i] ^= 0x40
				}
			})
			if !errors.Is(err, ErrFailed) {
				t.Errorf("%v: AuthHello byte %d changed: %v", m, i, err)
			}
		}
		for i := 0; i < proto.AuthAcceptLen; i++ {
			_, _, err := handshake(ic, ac, hsC, hsA, func(_, accept []byte) {
				if accept != nil {
					accept[i] ^= 0x01
				}
			})
			if !errors.Is(err, ErrFailed) {
				t.Errorf("%v: AuthAccept byte %d changed: %v", m, i, err)
			}
		}
		// A header field changed on the way: the CONNECT's as the acceptor
		// sees it, or the ACCEPT's as the initiator sees it.
		in, _ := Initiate(ic, newSeeded(10), hsC)
		other, _ := handshakeHeaders()
		other.SetPaths(4)
		if _, err := Respond(ac, newSeeded(11), other, proto.AuthHello(in.Hello())); !errors.Is(err, ErrFailed) {
			t.Errorf("%v: a CONNECT whose Paths changed: %v", m, err)
		}
		r, _ := Respond(ac, newSeeded(11), hsC, proto.AuthHello(in.Hello()))
		acc, _ := r.Answer(hsA)
		changed := bytes.Clone(hsA)
		proto.HandshakeHeader(changed).SetStreams(9)
		if _, err := in.Finish(changed, proto.AuthAccept(acc)); !errors.Is(err, ErrFailed) {
			t.Errorf("%v: an ACCEPT whose Streams changed: %v", m, err)
		}
		if !r.Same(proto.AuthHello(in.Hello())) {
			t.Errorf("%v: the hello the response checked is not the same", m)
		}
		again, _ := r.Answer(hsA)
		if !bytes.Equal(again, acc) {
			t.Errorf("%v: a second answer differs from the first", m)
		}
	}
}

// The wrong credentials fail: another pre-shared key, an initiator the
// acceptor does not admit, an acceptor other than the one pinned. A suite
// the acceptor does not know and another method are refused with the
// offsets of their fields.
func TestWrongCredentialsFail(t *testing.T) {
	hsC, hsA := handshakeHeaders()
	ic, ac := credentials(t, MethodPSK)
	wrong := &Credentials{Method: MethodPSK, PSK: bytes.Repeat([]byte{8}, PSKLen)}
	if _, _, err := handshake(wrong, ac, hsC, hsA, nil); !errors.Is(err, ErrFailed) {
		t.Errorf("another pre-shared key: %v", err)
	}
	kc, ka := credentials(t, MethodKeys)
	stranger := &Credentials{Method: MethodKeys, Static: staticKey(t, 4), Peers: kc.Peers}
	if _, _, err := handshake(stranger, ka, hsC, hsA, nil); !errors.Is(err, ErrFailed) {
		t.Errorf("an initiator not admitted: %v", err)
	}
	impostor := &Credentials{Method: MethodKeys, Static: staticKey(t, 5), Peers: ka.Peers}
	if _, _, err := handshake(kc, impostor, hsC, hsA, nil); !errors.Is(err, ErrFailed) {
		t.Errorf("an acceptor other than the one pinned: %v", err)
	}
	var refused *RefusedError
	if _, _, err := handshake(ic, ka, hsC, hsA, nil); !errors.As(err, &refused) || refused.Detail != DetailMethod {
		t.Errorf("a pre-shared key against static keys: %v", err)
	}
	if _, _, err := handshake(ic, ac, hsC, hsA, func(hello, _ []byte) {
		if hello != nil {
			hello[0] = 9
		}
	}); !errors.As(err, &refused) || refused.Detail != DetailSuite {
		t.Errorf("an unknown suite: %v", err)
	}
	// A low-order ephemeral key gives an all-zero X25519 result.
	if _, _, err := handshake(ic, ac, hsC, hsA, func(hello, _ []byte) {
		if hello != nil {
			clear(hello[4:36])
		}
	}); !errors.Is(err, ErrFailed) {
		t.Errorf("a zero ephemeral key: %v", err)
	}
	for _, c := range []*Credentials{
		{Method: MethodPSK, PSK: []byte{1}},
		{Method: MethodKeys},
		{Method: MethodKeys, Static: staticKey(t, 1)},
		{Method: 3},
		{Method: MethodPSK, PSK: make([]byte, PSKLen), Suite: 7},
		{Method: MethodKeys, Static: staticKey(t, 1), Peers: []*ecdh.PublicKey{lowOrder(t)}},
	} {
		if c.Check() == nil {
			t.Errorf("credentials %+v pass their check", c)
		}
	}
}

// sessions returns the two sides' sessions of one connection.
func sessions(t *testing.T, suite Suite, mpl time.Duration) (a, b *Session) {
	ic, ac := credentials(t, MethodPSK)
	ic.Suite = suite
	hsC, hsA := handshakeHeaders()
	is, as, err := handshake(ic, ac, hsC, hsA, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ = NewSession(is, mpl)
	b, _ = NewSession(as, mpl)
	return a, b
}

// packet builds a protected packet of type typ, path 3, PSN psn, with a
// payload of n bytes for the data types.
func packet(t *testing.T, typ proto.Type, psn uint32, n int) []byte {
	var p proto.Packet
	if !typ.HasPayload() {
		n = 0
	}
	if err := proto.BuildProtected(&p, make([]byte, 512), typ, 0, n); err != nil {
		t.Fatal(err)
	}
	p.Common.SetPathID(3)
	p.Common.SetPSN(psn)
	p.Common.SetDstConnID(0xABCD)
	if typ == proto.TypeWrite {
		p.Write().SetMsgLen(uint32(n))
	}
	for i := range p.Payload {
		p.Payload[i] = byte(i)
	}
	return p.Bytes()
}

// A sealed packet opens into what was sealed, and a change of any bit of
// it, header, ciphertext or tag, makes it fail to open.
func TestSealOpenAndEveryBitBound(t *testing.T) {
	for _, suite := range []Suite{AES128GCM, ChaCha20Poly1305} {
		a, b := sessions(t, suite, 0)
		for _, typ := range []proto.Type{proto.TypeWrite, proto.TypeAck} {
			plain := packet(t, typ, 77, 40)
			sealed := bytes.Clone(plain)
			if err := a.Seal(sealed, 0); err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(sealed[proto.CommonHeaderLen:], plain[proto.CommonHeaderLen:]) {
				t.Fatalf("%v %v: nothing was encrypted", suite, typ)
			}
			for bit := 0; bit < len(sealed)*8; bit += 3 {
				c := bytes.Clone(sealed)
				c[bit/8] ^= 1 << (bit % 8)
				if err := b.Open(c, 0); err == nil {
					t.Fatalf("%v %v: bit %d changed and the packet opened", suite, typ, bit)
				}
			}
			opened := bytes.Clone(sealed)
			if err := b.Open(opened, 0); err != nil {
				t.Fatalf("%v %v: %v", suite, typ, err)
			}
			if !bytes.Equal(opened[proto.CommonHeaderLen:len(opened)-proto.TagLen], plain[proto.CommonHeaderLen:len(plain)-proto.TagLen]) {
				t.Fatalf("%v %v: opened into other bytes", suite, typ)
			}
			// Sealed by the receiver's own send keys, it is not the sender's.
			mine := bytes.Clone(plain)
			b.Seal(mine, 0)
			if err := b.Open(mine, 0); err == nil {
				t.Fatalf("%v %v: a packet opened under the keys of the other direction", suite, typ)
			}
		}
	}
}

// Control packets carry a sequence number in PSN, and each opens once. The
// window takes them out of order within 1,024 and refuses older ones. Data
// packets are left to the DSN rules.
func TestControlReplayWindow(t *testing.T) {
	a, b := sessions(t, AES128GCM, 0)
	var sent [][]byte
	for i := 0; i < 3000; i++ {
		p := packet(t, proto.TypeAck, 0, 0)
		if err := a.Seal(p, 0); err != nil {
			t.Fatal(err)
		}
		if got := proto.CommonHeader(p).PSN(); got != uint32(i) {
			t.Fatalf("control packet %d carries number %d", i, got)
		}
		sent = append(sent, p)
	}
	open := func(i int) error { return b.Open(bytes.Clone(sent[i]), 0) }
	for _, i := range []int{5, 3, 4, 1000, 6, 2} { // out of order, within the window
		if err := open(i); err != nil {
			t.Fatalf("control packet %d: %v", i, err)
		}
	}
	for _, i := range []int{5, 3, 1000} {
		if err := open(i); !errors.Is(err, ErrReplay) {
			t.Errorf("control packet %d again: %v", i, err)
		}
	}
	if err := open(1500); err != nil {
		t.Fatal(err)
	}
	if err := open(476); !errors.Is(err, ErrReplay) { // 1,024 below the highest
		t.Errorf("a control packet 1,024 below the highest: %v", err)
	}
	if err := open(477); err != nil {
		t.Errorf("a control packet 1,023 below the highest: %v", err)
	}
	if err := open(2999); err != nil {
		t.Fatal(err)
	}
	if err := open(1500); !errors.Is(err, ErrReplay) {
		t.Errorf("a control packet far below the highest: %v", err)
	}
	data := packet(t, proto.TypeWrite, 9, 10)
	a.Seal(data, 0)
	for i := 0; i < 2; i++ {
		if err := b.Open(bytes.Clone(data), 0); err != nil {
			t.Errorf("a data packet opened a second time: %v (the DSN rules handle repeats)", err)
		}
	}
}

// Both directions move to the next key phase together: one side starts
// once it has heard its peer in the current phase for MPL, the other
// follows when the new phase's first packet opens, and packets of the
// phase before still open while packets two phases back do not.
func TestKeyPhasesMoveTogether(t *testing.T) {
	const mpl = 100 * time.Microsecond
	a, b := sessions(t, ChaCha20Poly1305, mpl)
	a.UpdateAfter, b.UpdateAfter = 4, 1<<40
	now := clock.Time(0)
	send := func(from, to *Session, typ proto.Type, psn uint32) ([]byte, error) {
		p := packet(t, typ, psn, 8)
		if err := from.Seal(p, now); err != nil {
			return nil, err
		}
		return p, to.Open(bytes.Clone(p), now)
	}
	var kept [][]byte
	for i := uint32(0); i < 40; i++ {
		p, err := send(a, b, proto.TypeWrite, i)
		if err != nil {
			t.Fatalf("packet %d of phase %d: %v", i, a.Phase(), err)
		}
		kept = append(kept, p)
		if _, err := send(b, a, proto.TypeAck, 0); err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
		if a.Phase() != b.Phase() {
			t.Fatalf("after packet %d the sides are in phases %d and %d", i, a.Phase(), b.Phase())
		}
		now = now.Add(mpl / 3)
	}
	if a.Phase() < 3 {
		t.Fatalf("phase %d after 40 packets, 4 to a phase, MPL apart", a.Phase())
	}
	// The first packet of the current phase, and one of the phase before,
	// open; one of two phases back does not.
	byPhase := map[uint8][]byte{}
	for _, p := range kept {
		byPhase[proto.CommonHeader(p).KeyPhase()] = p
	}
	n := uint8(a.Phase())
	for back, want := range map[uint8]bool{0: true, 1: true, 2: false} {
		p, ok := byPhase[(n-back)&3]
		if !ok {
			t.Fatalf("no packet of phase %d kept", n-back)
		}
		if err := b.Open(bytes.Clone(p), now); (err == nil) != want {
			t.Errorf("a packet %d phases back: %v", back, err)
		}
	}
}

// A side that may not move in time stops sealing at the limit rather than
// reuse its key past it.
func TestPhaseLimitStopsSealing(t *testing.T) {
	a, _ := sessions(t, AES128GCM, time.Second)
	a.UpdateAfter, a.limit = 2, 3
	for i := 0; i < 3; i++ {
		if err := a.Seal(packet(t, proto.TypeWrite, uint32(i), 4), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Seal(packet(t, proto.TypeWrite, 3, 4), 0); !errors.Is(err, ErrPhaseSpent) {
		t.Fatalf("the fourth packet of a phase limited to 3: %v", err)
	}
}

// Sealing and opening allocate nothing.
func TestSealOpenAllocateNothing(t *testing.T) {
	a, b := sessions(t, AES128GCM, 0)
	p := packet(t, proto.TypeWrite, 1, 256)
	buf := make([]byte, len(p))
	psn := uint32(0)
	allocs := testing.AllocsPerRun(200, func() {
		copy(buf, p)
		psn++
		proto.CommonHeader(buf).SetPSN(psn)
		if err := a.Seal(buf, 0); err != nil {
			t.Fatal(err)
		}
		if err := b.Open(buf, 0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations a packet", allocs)
	}
}

// Keys as text: hexadecimal and base64 read back the same 32 bytes, and
// anything else is refused.
func TestKeysAsText(t *testing.T) {
	k := staticKey(t, 9)
	b := k.Bytes()
	for _, text := range []string{FormatKey(b), FormatKey(b) + "\n", " " + hex.EncodeToString(b)} {
		got, err := ParsePrivateKey(text)
		if err != nil || !bytes.Equal(got.Bytes(), b) {
			t.Errorf("%q: %v", text, err)
		}
	}
	pub, err := ParsePublicKey(FormatKey(k.PublicKey().Bytes()))
	if err != nil || !pub.Equal(k.PublicKey()) {
		t.Errorf("public key: %v", err)
	}
	for _, bad := range []string{"", "abc", hex.EncodeToString(b)[:62], strings.Repeat("z", 64), FormatKey(b[:31]), strings.Repeat("!", 44)} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("%q read as a key", bad)
		}
	}
}

// Past its suite's integrity limit of packets that failed to open, a
// session says so, and the connection must end.
func TestForgeryLimit(t *testing.T) {
	a, b := sessions(t, ChaCha20Poly1305, 0)
	b.forgeries = 3
	p := packet(t, proto.TypeWrite, 1, 16)
	a.Seal(p, 0)
	for i := 1; i <= 3; i++ {
		bad := bytes.Clone(p)
		bad[40] ^= 1
		err := b.Open(bad, 0)
		if want := i == 3; errors.Is(err, ErrForgeryLimit) != want || err == nil {
			t.Fatalf("failure %d: %v", i, err)
		}
	}
	if ChaCha20Poly1305.forgeryLimit() != 1<<36 || AES128GCM.forgeryLimit() != 1<<52 {
		t.Error("the integrity limits are not RFC 9001's")
	}
}

// lowOrder is an X25519 public key of low order: all zeros.
func lowOrder(t *testing.T) *ecdh.PublicKey {
	k, err := ecdh.X25519().NewPublicKey(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}
