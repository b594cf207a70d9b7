package proto

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// parseHex reads a golden file of hex byte pairs, with '#' comments to the
// end of a line.
func parseHex(t testing.TB, text string) []byte {
	t.Helper()
	var out []byte
	for _, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for _, tok := range strings.Fields(line) {
			var b byte
			if len(tok) != 2 {
				t.Fatalf("bad hex token %q", tok)
			}
			for _, c := range []byte(tok) {
				switch {
				case '0' <= c && c <= '9':
					b = b<<4 | (c - '0')
				case 'a' <= c && c <= 'f':
					b = b<<4 | (c - 'a' + 10)
				default:
					t.Fatalf("bad hex token %q", tok)
				}
			}
			out = append(out, b)
		}
	}
	return out
}

type goldenPacket struct {
	name string
	wire []byte
}

func loadGolden(t testing.TB) []goldenPacket {
	t.Helper()
	files, err := filepath.Glob("../testdata/golden/*.hex")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden packets: %v", err)
	}
	var out []goldenPacket
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, goldenPacket{filepath.Base(f), parseHex(t, string(text))})
	}
	return out
}

// Every defined type has a golden packet.
func TestGoldenCoversEveryType(t *testing.T) {
	seen := map[Type]bool{}
	for _, g := range loadGolden(t) {
		seen[Type(g.wire[1])] = true
	}
	for _, ty := range Types {
		if !seen[ty] {
			t.Errorf("no golden packet of type %s", ty)
		}
	}
}

// Each golden packet decodes, and rebuilding it field by field through Build,
// the setters and Seal gives the same bytes, CRC included.
func TestGoldenRoundTrip(t *testing.T) {
	for _, g := range loadGolden(t) {
		t.Run(g.name, func(t *testing.T) {
			var p Packet
			if err := p.Decode(g.wire); err != nil {
				t.Fatalf("decode: %v", err)
			}
			records := 0
			if p.Type() == TypeAck {
				records = int(p.Ack().RecordCount())
			}
			buf := make([]byte, 2048)
			var q Packet
			if err := Build(&q, buf, p.Type(), records, len(p.Payload)); err != nil {
				t.Fatalf("build: %v", err)
			}
			copyFields(t, &p, &q)
			copy(q.Payload, p.Payload)
			if got := q.Seal(); !reflect.DeepEqual(got, g.wire) {
				t.Errorf("rebuilt packet differs:\n got  % x\n want % x", got, g.wire)
			}
		})
	}
}

// copyFields copies every non-reserved field of every section of src into dst
// through the getters and setters the spec names. A handshake's
// capabilities go first, since AUTH among them adds a part.
func copyFields(t testing.TB, src, dst *Packet) {
	t.Helper()
	if ty := src.Type(); ty == TypeConnect || ty == TypeAccept {
		dst.Handshake().SetCapabilities(src.Handshake().Capabilities())
	}
	from, to := src.Sections(), dst.Sections()
	if len(from) != len(to) {
		t.Fatalf("sections: %d vs %d", len(from), len(to))
	}
	for i, s := range from {
		vt := viewTypes[s.Layout.Name]
		sv := reflect.ValueOf(s.Bytes).Convert(vt)
		dv := reflect.ValueOf(to[i].Bytes).Convert(vt)
		for _, f := range s.Layout.Fields {
			if f.Reserved() {
				continue
			}
			get, _ := vt.MethodByName(f.Name)
			set, _ := vt.MethodByName("Set" + f.Name)
			set.Func.Call([]reflect.Value{dv, get.Func.Call([]reflect.Value{sv})[0]})
		}
	}
}

// Spot checks of values the golden files' comments state, read through the
// typed accessors, for fields whose encoding is easy to get wrong.
func TestGoldenValues(t *testing.T) {
	byName := map[string]*Packet{}
	for _, g := range loadGolden(t) {
		var p Packet
		if err := p.Decode(g.wire); err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		byName[g.name] = &p
	}
	check := func(file, what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s %s = %v, want %v", file, what, got, want)
		}
	}
	w := byName["01-write.hex"]
	check("01", "Flags", w.Common.Flags(), FlagAckRequest|FlagRetransmit)
	check("01", "PathID", w.Common.PathID(), uint8(7))
	check("01", "Epoch", w.Common.Epoch(), uint8(2))
	check("01", "PSN", w.Common.PSN(), uint32(0xFFFFFFFF))
	check("01", "Backlog bytes", DecodeBacklog(w.Common.Backlog()), uint64(1024))
	check("01", "RKey", w.Write().RKey(), uint64(0x0123456789ABCDEF))
	check("01", "MSN", w.Write().MSN(), uint32(0xFFFFFFFF))
	check("01", "payload", string(w.Payload), "mroce v0")

	wi := byName["02-write-imm.hex"]
	check("02", "RemoteOffset", wi.Write().RemoteOffset(), uint64(1)<<32)
	check("02", "RSN", wi.Imm().RSN(), uint32(2))
	check("02", "Immediate", wi.Imm().Immediate(), uint32(0xDEADBEEF))

	s := byName["03-send.hex"]
	check("03", "Epoch", s.Common.Epoch(), uint8(3))
	check("03", "PathID", s.Common.PathID(), uint8(255))
	check("03", "Stream", s.Send().Stream(), uint16(65534))
	check("03", "MsgOffset", s.Send().MsgOffset(), uint32(4080))

	a := byName["06-ack.hex"]
	check("06", "RateHint", a.Ack().RateHint(), uint64(50e9/8))
	check("06", "RecordCount", a.Ack().RecordCount(), uint8(2))
	r0, r1 := a.AckRecord(0), a.AckRecord(1)
	check("06", "r0.Epoch", r0.Epoch(), uint8(1))
	check("06", "r0.HighestPSN", r0.HighestPSN(), uint32(2))
	for k, want := range []bool{true, false, true, true, false} {
		check("06", "r0 bit "+string(rune('0'+k)), r0.Received(k), want)
	}
	check("06", "r1 bit 254", r1.Received(254), true)
	check("06", "r1 bit 255", r1.Received(255), false)

	n := byName["07-nack.hex"]
	check("07", "Code", n.Nack().Code(), NackRNR)
	check("07", "fatal", n.Nack().Code().Fatal(), false)
	check("07", "RetryAfter", n.Nack().RetryAfter(), uint16(500))
	check("07", "Epoch", n.Nack().Epoch(), uint8(3))

	c := byName["09-connect.hex"]
	check("09", "MaxPacket", c.Handshake().MaxPacket(), uint16(8972))
	check("09", "InboundCapacity", c.Handshake().InboundCapacity(), uint64(400e9/8))
	check("09", "Capabilities", c.Handshake().Capabilities(), Capabilities(0))
	check("11", "Reason", byName["11-close.hex"].Close().Reason(), CloseFatal)
	check("13", "EchoTimestamp", byName["13-probe-reply.hex"].ProbeReply().EchoTimestamp(), uint32(0x0A0B0C0D))

	r := byName["14-retry.hex"]
	check("14", "DstConnID", r.Common.DstConnID(), c.Handshake().SrcConnID())
	check("14", "Token", r.Retry().Token(), [TokenLen]byte{0x00, 0x01, 0xe2, 0x40, 0xd4, 0x14, 0xb8, 0x1a, 0x6a, 0x3b, 0xaf, 0x95, 0x55, 0xda, 0xa0, 0x40})
	check("14", "length", len(r.Bytes()), 48)
	ct := byName["15-connect-token.hex"]
	tok, _ := ct.Token()
	check("15", "token", tok, r.Retry().Token())
	check("15", "SrcConnID", ct.Handshake().SrcConnID(), c.Handshake().SrcConnID())
}
