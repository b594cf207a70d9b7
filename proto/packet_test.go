package proto

import (
	"errors"
	"math"
	"testing"
)

// reseal rewrites the CRC of a mutated packet so a test reaches the check after it.
func reseal(b []byte) []byte {
	if len(b) >= TrailerLen {
		n := len(b) - TrailerLen
		be.PutUint32(b[n:], Checksum(b[:n]))
	}
	return b
}

func golden(t testing.TB, name string) []byte {
	for _, g := range loadGolden(t) {
		if g.name == name {
			return append([]byte(nil), g.wire...)
		}
	}
	t.Fatalf("no golden packet %s", name)
	return nil
}

func TestDecodeRejectsMalformed(t *testing.T) {
	write := golden(t, "01-write.hex")
	ack := golden(t, "06-ack.hex")
	cases := []struct {
		name string
		pkt  func() []byte
		want Error
	}{
		{"empty", func() []byte { return nil }, ErrTruncated},
		{"31 bytes", func() []byte { return write[:31] }, ErrTruncated},
		{"cut inside header", func() []byte { return reseal(append([]byte(nil), write[:40]...)) }, ErrTruncated},
		{"bad CRC", func() []byte { b := append([]byte(nil), write...); b[len(b)-1] ^= 1; return b }, ErrBadCRC},
		{"payload bit flip", func() []byte { b := append([]byte(nil), write...); b[62] ^= 0x10; return b }, ErrBadCRC},
		{"version 1", func() []byte { b := append([]byte(nil), write...); b[0] = 0x10; return reseal(b) }, ErrVersion},
		{"version 15", func() []byte { b := append([]byte(nil), write...); b[0] = 0xF0; return reseal(b) }, ErrVersion},
		{"type 0", func() []byte { b := append([]byte(nil), write...); b[1] = 0; return reseal(b) }, ErrUnknownType},
		{"reserved type 0x04", func() []byte { b := append([]byte(nil), write...); b[1] = 0x04; return reseal(b) }, ErrUnknownType},
		{"atomic type 0x30", func() []byte { b := append([]byte(nil), write...); b[1] = 0x30; return reseal(b) }, ErrUnknownType},
		{"HdrLen short", func() []byte { b := append([]byte(nil), write...); b[4] = 7; return reseal(b) }, ErrHeaderLength},
		{"HdrLen long", func() []byte { b := append([]byte(nil), write...); b[4] = 16; return reseal(b) }, ErrHeaderLength},
		{"HdrLen 255", func() []byte { b := append([]byte(nil), write...); b[4] = 255; return reseal(b) }, ErrHeaderLength},
		{"type changed, HdrLen kept", func() []byte { b := append([]byte(nil), write...); b[1] = byte(TypeSend); return reseal(b) }, ErrHeaderLength},
		{"ACK 19 records", func() []byte { b := append([]byte(nil), ack...); b[32] = 19; return reseal(b) }, ErrRecordCount},
		{"ACK count lies high", func() []byte { b := append([]byte(nil), ack...); b[32] = 3; return reseal(b) }, ErrHeaderLength},
		{"ACK count lies low", func() []byte { b := append([]byte(nil), ack...); b[32] = 1; return reseal(b) }, ErrHeaderLength},
		{"ACK record cut off", func() []byte { return reseal(append([]byte(nil), ack[:100]...)) }, ErrTruncated},
		{"ACK header cut off", func() []byte { return reseal(append([]byte(nil), ack[:40]...)) }, ErrTruncated},
		{"payload past MsgLen", func() []byte { b := append([]byte(nil), write...); b[28+19] = 23; return reseal(b) }, ErrPayload},
		{"MsgOffset overflow", func() []byte {
			b := append([]byte(nil), write...)
			copy(b[28+20:], []byte{0xFF, 0xFF, 0xFF, 0xFC})
			return reseal(b)
		}, ErrPayload},
		{"payload on READ_REQ", func() []byte { return reseal(append(golden(t, "04-read-req.hex"), 0, 0, 0, 0)) }, ErrPayload},
		{"payload on ACK", func() []byte {
			b := golden(t, "06-ack.hex")
			return reseal(append(b[:len(b)-4:len(b)-4], 1, 2, 3, 4, 0, 0, 0, 0))
		}, ErrPayload},
		{"CONNECT token one byte short", func() []byte { return cutPayload(golden(t, "15-connect-token.hex"), 1) }, ErrPayload},
		{"CONNECT token one byte long", func() []byte { return growPayload(golden(t, "15-connect-token.hex"), 1) }, ErrPayload},
		{"CONNECT with 4 bytes", func() []byte { return growPayload(golden(t, "09-connect.hex"), 4) }, ErrPayload},
		{"ACCEPT with a token", func() []byte { return growPayload(golden(t, "10-accept.hex"), TokenLen) }, ErrPayload},
		{"RETRY with a payload", func() []byte { return growPayload(golden(t, "14-retry.hex"), TokenLen) }, ErrPayload},
		{"RETRY token cut", func() []byte { return cutPayload(golden(t, "14-retry.hex"), 4) }, ErrTruncated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p Packet
			err := p.Decode(c.pkt())
			if !errors.Is(err, c.want) {
				t.Fatalf("Decode = %v, want %v", err, c.want)
			}
			if p.Bytes() != nil {
				t.Errorf("a failed Decode changed the packet view")
			}
		})
	}
}

// growPayload inserts n bytes before a packet's trailer, and cutPayload
// removes the n before it, and each reseals.
func growPayload(b []byte, n int) []byte {
	k := len(b) - TrailerLen
	return reseal(append(append(b[:k:k], make([]byte, n)...), 0, 0, 0, 0))
}

func cutPayload(b []byte, n int) []byte {
	k := len(b) - TrailerLen - n
	return reseal(append(b[:k:k], 0, 0, 0, 0))
}

// A CONNECT carries a RETRY's token, all TokenLen bytes of it, or nothing
// (spec sections 5.8 and 8.1). Only a CONNECT does.
func TestConnectToken(t *testing.T) {
	var retry, withToken, plain Packet
	for _, c := range []struct {
		p    *Packet
		name string
	}{{&retry, "14-retry.hex"}, {&withToken, "15-connect-token.hex"}, {&plain, "09-connect.hex"}} {
		if err := c.p.Decode(golden(t, c.name)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	tok, ok := withToken.Token()
	if !ok || tok != retry.Retry().Token() {
		t.Fatalf("the CONNECT's token %x (%v), the RETRY's %x", tok, ok, retry.Retry().Token())
	}
	if _, ok := plain.Token(); ok {
		t.Error("a CONNECT without a payload has a token")
	}
	if _, ok := retry.Token(); ok {
		t.Error("a RETRY has a token as its payload")
	}
	if withToken.Type().HasPayload() || !withToken.Type().CarriesToken() || TypeAccept.CarriesToken() {
		t.Error("HasPayload or CarriesToken is wrong")
	}
	var p Packet
	buf := make([]byte, 256)
	for _, n := range []int{1, TokenLen - 1, TokenLen + 1} {
		if err := Build(&p, buf, TypeConnect, 0, n); err != ErrPayload {
			t.Errorf("Build of a CONNECT with %d bytes of payload: %v", n, err)
		}
	}
	if err := Build(&p, buf, TypeAccept, 0, TokenLen); err != ErrPayload {
		t.Errorf("Build of an ACCEPT with a token: %v", err)
	}
	if err := Build(&p, buf, TypeConnect, 0, TokenLen); err != nil || len(p.Payload) != TokenLen {
		t.Fatalf("Build of a CONNECT with a token: %v, payload %d", err, len(p.Payload))
	}
	// A token is never left out of a placeholder, which has no bytes for it.
	if err := BuildPlaceholder(&p, buf, TypeConnect, TokenLen); err != ErrPayload {
		t.Errorf("BuildPlaceholder of a CONNECT with a token: %v", err)
	}
	hlen, _ := HeaderLen(TypeConnect, 0)
	if err := p.DecodePlaceholder(golden(t, "09-connect.hex")[:hlen], TokenLen+TrailerLen); err != ErrPayload {
		t.Errorf("DecodePlaceholder of a CONNECT whose token is padding: %v", err)
	}
}

func TestDecodeNoCRCSkipsOnlyTheCRC(t *testing.T) {
	b := golden(t, "01-write.hex")
	b[len(b)-1] ^= 0xFF
	var p Packet
	if err := p.Decode(b); err != ErrBadCRC {
		t.Fatalf("Decode = %v, want bad CRC", err)
	}
	if err := p.DecodeNoCRC(b); err != nil {
		t.Fatalf("DecodeNoCRC = %v", err)
	}
	b[0] = 0x10
	if err := p.DecodeNoCRC(b); err != ErrVersion {
		t.Fatalf("DecodeNoCRC of version 1 = %v", err)
	}
}

// A placeholder is a packet's header with its payload and trailer left as
// padding. Decoded, it has the fields and payload length of the whole
// packet. Built again from those fields, it gives the same header.
func TestPlaceholderRoundTrip(t *testing.T) {
	whole := golden(t, "01-write.hex")
	var p, ph Packet
	if err := p.Decode(whole); err != nil {
		t.Fatal(err)
	}
	hlen, _ := HeaderLen(TypeWrite, 0)
	pad := len(whole) - hlen
	if err := ph.DecodePlaceholder(whole[:hlen], pad); err != nil {
		t.Fatalf("DecodePlaceholder: %v", err)
	}
	if ph.Pad() != pad || len(ph.Payload) != len(p.Payload) || string(ph.Bytes()) != string(whole[:hlen]) ||
		ph.Write().RKey() != p.Write().RKey() || ph.Write().MsgOffset() != p.Write().MsgOffset() {
		t.Fatalf("placeholder: pad %d, payload %d, header %x; whole packet: payload %d, header %x",
			ph.Pad(), len(ph.Payload), ph.Bytes(), len(p.Payload), whole[:hlen])
	}
	var q Packet
	if err := BuildPlaceholder(&q, make([]byte, 200), TypeWrite, len(p.Payload)); err != nil {
		t.Fatalf("BuildPlaceholder: %v", err)
	}
	copy(q.Bytes()[CommonHeaderLen:], whole[CommonHeaderLen:hlen])
	copy(q.Bytes()[:CommonHeaderLen], whole[:CommonHeaderLen])
	if string(q.Bytes()) != string(whole[:hlen]) || q.Pad() != pad || len(q.Payload) != len(p.Payload) {
		t.Fatalf("built placeholder: %x pad %d, want %x pad %d", q.Bytes(), q.Pad(), whole[:hlen], pad)
	}
	if p.Pad() != 0 {
		t.Errorf("a whole packet's Pad is %d", p.Pad())
	}
}

func TestPlaceholderRejectsMalformed(t *testing.T) {
	whole := golden(t, "01-write.hex")
	hlen, _ := HeaderLen(TypeWrite, 0)
	header := func() []byte { return append([]byte(nil), whole[:hlen]...) }
	pad := len(whole) - hlen
	readReq := golden(t, "04-read-req.hex")
	rlen, _ := HeaderLen(TypeReadReq, 0)
	for _, c := range []struct {
		name   string
		header []byte
		pad    int
		want   Error
	}{
		{"no trailer", header(), TrailerLen - 1, ErrTruncated},
		{"negative", header(), -1, ErrTruncated},
		{"longer than a datagram", header(), MaxPacketLen, ErrTruncated},
		{"longer than an int", header(), math.MaxInt - 10, ErrTruncated},
		{"no header", nil, pad, ErrTruncated},
		{"header cut", header()[:hlen-4], pad, ErrHeaderLength},
		{"header and payload", whole[:hlen+4], pad - 4, ErrHeaderLength},
		{"version 1", func() []byte { b := header(); b[0] = 0x10; return b }(), pad, ErrVersion},
		{"type 0", func() []byte { b := header(); b[1] = 0; return b }(), pad, ErrUnknownType},
		{"an ACK", golden(t, "06-ack.hex")[:CommonHeaderLen+AckHeaderLen], TrailerLen, ErrHeaderLength},
		{"payload past MsgLen", header(), pad + 4, ErrPayload},
		{"payload on READ_REQ", readReq[:rlen], TrailerLen + 4, ErrPayload},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p Packet
			if err := p.DecodePlaceholder(c.header, c.pad); !errors.Is(err, c.want) {
				t.Fatalf("DecodePlaceholder = %v, want %v", err, c.want)
			}
			if p.Bytes() != nil {
				t.Errorf("a failed DecodePlaceholder changed the packet view")
			}
		})
	}
	if err := (&Packet{}).DecodePlaceholder(readReq[:rlen], TrailerLen); err != nil {
		t.Errorf("a READ_REQ with nothing padded but its trailer: %v", err)
	}
	var p Packet
	for _, c := range []struct {
		name string
		t    Type
		buf  int
		n    int
		want Error
	}{
		{"ACK", TypeAck, 200, 0, ErrPayload},
		{"payload on READ_REQ", TypeReadReq, 200, 4, ErrPayload},
		{"negative payload", TypeWrite, 200, -1, ErrPayload},
		{"buffer short of the header", TypeWrite, hlen - 1, 10, ErrBufferSize},
		{"longer than a datagram", TypeWrite, 200, MaxPacketLen, ErrBufferSize},
	} {
		if err := BuildPlaceholder(&p, make([]byte, c.buf), c.t, c.n); !errors.Is(err, c.want) {
			t.Errorf("%s: BuildPlaceholder = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestBuildChecksArguments(t *testing.T) {
	var p Packet
	buf := make([]byte, 100)
	for _, c := range []struct {
		name             string
		buf              []byte
		ty               Type
		records, payload int
		want             Error
	}{
		{"unknown type", buf, 0x04, 0, 0, ErrUnknownType},
		{"too many records", make([]byte, 4096), TypeAck, 19, 0, ErrRecordCount},
		{"negative records", buf, TypeAck, -1, 0, ErrRecordCount},
		{"payload on ACK", buf, TypeAck, 0, 1, ErrPayload},
		{"negative payload", buf, TypeWrite, 0, -1, ErrPayload},
		{"buffer too small", buf, TypeWrite, 0, 37, ErrBufferSize},
		{"over the UDP maximum", make([]byte, 70000), TypeWrite, 0, MaxPacketLen, ErrBufferSize},
	} {
		if err := Build(&p, c.buf, c.ty, c.records, c.payload); err != c.want {
			t.Errorf("%s: Build = %v, want %v", c.name, err, c.want)
		}
	}
	if err := Build(&p, buf, TypeWrite, 0, 36); err != nil || len(p.Seal()) != 100 {
		t.Errorf("a packet that exactly fills the buffer: %v", err)
	}
}

// Build clears a reused buffer's header, so stale bytes never leak into
// reserved fields.
func TestBuildClearsHeader(t *testing.T) {
	buf := make([]byte, 256)
	for i := range buf {
		buf[i] = 0xFF
	}
	var p Packet
	if err := Build(&p, buf, TypeSend, 0, 0); err != nil {
		t.Fatal(err)
	}
	wire := p.Seal()
	var q Packet
	if err := q.Decode(wire); err != nil {
		t.Fatal(err)
	}
	for i, b := range wire[:48] {
		want := byte(0)
		switch i {
		case 1:
			want = byte(TypeSend)
		case 4:
			want = 12
		}
		if b != want {
			t.Errorf("byte %d = %#x, want %#x", i, b, want)
		}
	}
}

func TestErrorsAreDistinctAndNamed(t *testing.T) {
	seen := map[string]bool{}
	for e := Error(1); int(e) < NumErrors; e++ {
		s := e.Error()
		if seen[s] || s == Error(0).Error() {
			t.Errorf("error %d text %q is not distinct", e, s)
		}
		seen[s] = true
	}
}

func TestChecksumCheckValue(t *testing.T) {
	if got := Checksum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("CRC32C check value = %#x, want 0xe3069283", got)
	}
}

// buildWrite makes a WRITE with a 4 KiB payload as the engine will. It
// builds the packet, sets the fields, copies the payload from the source
// region and seals it.
func buildWrite(p *Packet, buf, region []byte, psn uint32) []byte {
	if err := Build(p, buf, TypeWrite, 0, len(region)); err != nil {
		panic(err)
	}
	c := p.Common
	c.SetPathID(3)
	c.SetDstConnID(0xA1B2C3D4)
	c.SetPSN(psn)
	c.SetDSN(psn + 100)
	c.SetTimestamp(psn * 7)
	c.SetBacklog(EncodeBacklog(1 << 20))
	w := p.Write()
	w.SetRKey(0x0123456789ABCDEF)
	w.SetRemoteOffset(1 << 20)
	w.SetMsgLen(1 << 20)
	w.SetMsgOffset(8192)
	w.SetStream(1)
	w.SetMSN(9)
	copy(p.Payload, region)
	return p.Seal()
}

func TestDataPathAllocatesNothing(t *testing.T) {
	buf := make([]byte, 4200)
	region := make([]byte, 4096)
	var p, q Packet
	wire := buildWrite(&p, buf, region, 1)
	if n := testing.AllocsPerRun(1000, func() { buildWrite(&p, buf, region, 2) }); n != 0 {
		t.Errorf("encoding a WRITE allocates %.1f times", n)
	}
	wire = buildWrite(&p, buf, region, 3)
	if n := testing.AllocsPerRun(1000, func() {
		if err := q.Decode(wire); err != nil {
			panic(err)
		}
		_ = q.Write().RKey() + uint64(q.Common.PSN())
	}); n != 0 {
		t.Errorf("decoding a WRITE allocates %.1f times", n)
	}
	bad := append([]byte(nil), wire...)
	bad[100] ^= 1
	if n := testing.AllocsPerRun(1000, func() { _ = q.Decode(bad) }); n != 0 {
		t.Errorf("refusing a bad packet allocates %.1f times", n)
	}
}

func BenchmarkEncodeWrite4K(b *testing.B) {
	buf := make([]byte, 4200)
	region := make([]byte, 4096)
	var p Packet
	b.SetBytes(4096)
	for i := 0; b.Loop(); i++ {
		buildWrite(&p, buf, region, uint32(i))
	}
}

func BenchmarkDecodeWrite4K(b *testing.B) {
	buf := make([]byte, 4200)
	var p, q Packet
	wire := buildWrite(&p, buf, make([]byte, 4096), 1)
	b.SetBytes(int64(len(wire)))
	for b.Loop() {
		if err := q.Decode(wire); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeNoCRCWrite4K is Decode without the CRC. It measures what
// the header checks cost on their own.
func BenchmarkDecodeNoCRCWrite4K(b *testing.B) {
	buf := make([]byte, 4200)
	var p, q Packet
	wire := buildWrite(&p, buf, make([]byte, 4096), 1)
	for b.Loop() {
		if err := q.DecodeNoCRC(wire); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCRC32C4K(b *testing.B) {
	data := make([]byte, 4096+60)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		Checksum(data)
	}
}

// Bit k of a record's bitvector is PSN HighestPSN-1-k. Bit 0 is the top bit
// of the vector's first byte, and bit 255 the low bit of its last. Marking
// and clearing a bit touch that bit only.
func TestAckRecordBits(t *testing.T) {
	rec := make(AckRecord, AckRecordLen)
	for _, k := range []int{0, 7, 8, 255} {
		rec.MarkReceived(k)
	}
	bv := rec.Bitvector()
	if bv[0] != 0x81 || bv[1] != 0x80 || bv[31] != 0x01 {
		t.Fatalf("bitvector % x", bv)
	}
	rec.ClearReceived(7)
	rec.ClearReceived(9) // not set, so it stays clear
	for k := 0; k < 256; k++ {
		if want := k == 0 || k == 8 || k == 255; rec.Received(k) != want {
			t.Errorf("bit %d: %v", k, rec.Received(k))
		}
	}
}

// A CONNECT or ACCEPT with AUTH in its capabilities carries its key
// exchange as its payload, a CONNECT's followed by a token when it returns
// one (spec section 13.3); without AUTH the key exchange is not allowed.
func TestAuthHandshakePayloads(t *testing.T) {
	build := func(typ Type, caps Capabilities, n int) []byte {
		t.Helper()
		var p Packet
		if err := Build(&p, make([]byte, 512), typ, 0, n); err != nil {
			t.Fatalf("Build of a %v with %d bytes of payload: %v", typ, n, err)
		}
		p.Handshake().SetCapabilities(caps)
		for i := range p.Payload {
			p.Payload[i] = byte(i + 1)
		}
		return p.Seal()
	}
	cases := []struct {
		typ        Type
		caps       Capabilities
		n          int
		err        error
		hello, tok bool
	}{
		{TypeConnect, CapAuth, AuthHelloLen, nil, true, false},
		{TypeConnect, CapAuth, AuthHelloLen + TokenLen, nil, true, true},
		{TypeConnect, CapAuth, 0, ErrPayload, false, false},
		{TypeConnect, CapAuth, TokenLen, ErrPayload, false, false},
		{TypeConnect, 0, AuthHelloLen, ErrPayload, false, false},
		{TypeConnect, 0, TokenLen, nil, false, true},
		{TypeAccept, CapAuth, AuthAcceptLen, nil, false, false},
		{TypeAccept, CapAuth, 0, ErrPayload, false, false},
		{TypeAccept, 0, AuthAcceptLen, ErrPayload, false, false},
	}
	for _, c := range cases {
		var p Packet
		err := p.Decode(build(c.typ, c.caps, c.n))
		if err != c.err {
			t.Errorf("%v %v with %d bytes: %v, want %v", c.typ, c.caps, c.n, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		h, hello := p.AuthHello()
		a, accept := p.AuthAccept()
		tok, hasTok := p.Token()
		if hello != c.hello || hasTok != c.tok || accept != (c.typ == TypeAccept && c.caps&CapAuth != 0) {
			t.Errorf("%v %v with %d bytes: AuthHello %v, AuthAccept %v, token %v", c.typ, c.caps, c.n, hello, accept, hasTok)
		}
		if hello && (h.Suite() != 1 || h.Confirm()[15] != AuthHelloLen) {
			t.Errorf("AuthHello is the wrong bytes: suite %d, confirm %x", h.Suite(), h.Confirm())
		}
		if hasTok && tok[0] != byte(c.n-TokenLen+1) {
			t.Errorf("the token is not the payload's last %d bytes: %x", TokenLen, tok)
		}
		if accept && a.Confirm()[15] != AuthAcceptLen {
			t.Errorf("AuthAccept is the wrong bytes: %x", a.Confirm())
		}
	}
	var p Packet
	for _, n := range []int{AuthHelloLen - 1, AuthHelloLen + 1, AuthAcceptLen} {
		if err := Build(&p, make([]byte, 512), TypeConnect, 0, n); err != ErrPayload {
			t.Errorf("Build of a CONNECT with %d bytes: %v", n, err)
		}
	}
}

// A protected packet is refused by Decode, whatever its bytes, and read by
// DecodeOpened once its keys have opened it, with its 16-byte tag where
// the trailer was (spec sections 9 and 13.4).
func TestProtectedPackets(t *testing.T) {
	var p Packet
	buf := make([]byte, 256)
	if err := BuildProtected(&p, buf, TypeWrite, 0, 10); err != nil {
		t.Fatal(err)
	}
	hlen, _ := HeaderLen(TypeWrite, 0)
	raw := p.Bytes()
	if !p.Common.Protected() || len(raw) != hlen+10+TagLen || len(p.Payload) != 10 || len(p.Tag()) != TagLen {
		t.Fatalf("protected WRITE: protected %v, %d bytes, payload %d", p.Common.Protected(), len(raw), len(p.Payload))
	}
	p.Common.SetKeyPhase(2)
	p.Write().SetMsgLen(10)
	copy(p.Payload, "0123456789")
	var q Packet
	if err := q.Decode(raw); err != ErrProtected {
		t.Errorf("Decode of a protected packet: %v", err)
	}
	if err := q.DecodeNoCRC(raw); err != ErrProtected {
		t.Errorf("DecodeNoCRC of a protected packet: %v", err)
	}
	if err := q.DecodeOpened(raw); err != nil || string(q.Payload) != "0123456789" || q.Common.KeyPhase() != 2 || q.Write().MsgLen() != 10 {
		t.Fatalf("DecodeOpened: %v, payload %q, phase %d", err, q.Payload, q.Common.KeyPhase())
	}
	if s := q.Sections(); s[len(s)-1].Layout.Name != "Tag" {
		t.Errorf("a protected packet's last section is %s", s[len(s)-1].Layout.Name)
	}
	if err := q.DecodeOpened(raw[:MinProtectedLen-1]); err != ErrTruncated {
		t.Errorf("DecodeOpened of %d bytes: %v", MinProtectedLen-1, err)
	}
	if err := q.DecodeOpened(golden(t, "01-write.hex")); err != ErrAuthFailed {
		t.Errorf("DecodeOpened of an unprotected packet: %v", err)
	}
	if err := BuildProtected(&p, buf, TypeCNP, 0, 0); err != nil || len(p.Bytes()) != MinProtectedLen {
		t.Errorf("a protected CNP: %v, %d bytes", err, len(p.Bytes()))
	}
	defer func() {
		if recover() == nil {
			t.Error("Seal of a protected packet wrote a CRC over its tag")
		}
	}()
	p.Seal()
}
