package dissect

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mroce/mroce/internal/hexfmt"
	"github.com/mroce/mroce/proto"
)

// goldenDir holds the hand-written golden packets, one per file.
const goldenDir = "../testdata/golden"

// goldenFiles are the golden packets' files, in name order. There must be
// some, since the tests below are about them.
func goldenFiles(tb testing.TB) []string {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.hex"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(files) == 0 {
		tb.Fatalf("no golden packets in %s", goldenDir)
	}
	return files
}

// build lays out a packet of type typ, lets set fill in its fields and
// payload, and returns it sealed.
func build(t *testing.T, typ proto.Type, records, payloadLen int, set func(p *proto.Packet)) []byte {
	t.Helper()
	var p proto.Packet
	buf := make([]byte, proto.MaxPacketLen)
	if err := proto.Build(&p, buf, typ, records, payloadLen); err != nil {
		t.Fatalf("Build %v: %v", typ, err)
	}
	if set != nil {
		set(&p)
	}
	return bytes.Clone(p.Seal())
}

// reseal rewrites the CRC trailer of b after a test changed its bytes.
func reseal(b []byte) []byte {
	b = bytes.Clone(b)
	n := len(b) - proto.TrailerLen
	c := proto.Checksum(b[:n])
	b[n], b[n+1], b[n+2], b[n+3] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
	return b
}

// dissectOne decodes packet b and returns what Fields writes of it.
func dissectOne(t *testing.T, b []byte) string {
	t.Helper()
	var p proto.Packet
	if err := p.Decode(b); err != nil {
		t.Fatalf("decode: %v", err)
	}
	var out strings.Builder
	Fields(&out, &p, true)
	return out.String()
}

// checkFields checks that out prints every part of p in order, each with
// every non-reserved field of the part on its own line after the part's
// title, with the field's decimal value, or its hex digits for fields wider
// than 64 bits.
func checkFields(t *testing.T, name, out string, p *proto.Packet) {
	t.Helper()
	lines := strings.Split(out, "\n")
	i := 0
	find := func(what string, match func(string) bool) bool {
		for ; i < len(lines); i++ {
			if match(lines[i]) {
				i++
				return true
			}
		}
		t.Errorf("%s: no line for %s in order in:\n%s", name, what, out)
		return false
	}
	for _, s := range p.Sections() {
		title := s.Layout.Name
		if title == "AckRecord" {
			title = fmt.Sprintf("AckRecord #%d", s.Index)
		}
		if !find(title, func(l string) bool { return strings.HasPrefix(l, "  "+title+", bytes ") }) {
			return
		}
		for _, f := range s.Layout.Fields {
			if f.Reserved() {
				continue
			}
			var value string
			if f.Width > 64 {
				value = hex.EncodeToString(s.Bytes[f.Byte : f.Byte+f.Width/8])
			} else {
				value = fmt.Sprint(f.Uint(s.Bytes))
			}
			ok := find(s.Layout.Name+"."+f.Name+" = "+value, func(l string) bool {
				fields := strings.Fields(l)
				return len(fields) >= 2 && fields[0] == f.Name && strings.Contains(l, " "+value)
			})
			if !ok {
				return
			}
		}
	}
}

// Every golden packet is written whole. Every part comes in order with
// every field and its value, under a title line naming its type, and the
// CRC is found right.
func TestFieldsGolden(t *testing.T) {
	for _, file := range goldenFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		b, err := hexfmt.Parse(string(text))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		name := filepath.Base(file)
		var p proto.Packet
		if err := p.Decode(b); err != nil {
			t.Fatalf("%s: golden packet does not decode: %v", name, err)
		}
		if s := Summary(&p); !strings.HasPrefix(s, p.Type().String()+" (") {
			t.Errorf("%s: summary %q", name, s)
		}
		out := dissectOne(t, b)
		checkFields(t, name, out, &p)
		if !strings.Contains(out, "CRC32C ok") {
			t.Errorf("%s: CRC not reported ok:\n%s", name, out)
		}
	}
}

// ExplainError names the check a malformed packet failed, with the values
// that failed it.
func TestExplainError(t *testing.T) {
	write := build(t, proto.TypeWrite, 0, 8, func(p *proto.Packet) { p.Write().SetMsgLen(8) })
	ack := build(t, proto.TypeAck, 0, 0, nil)
	badCRC := bytes.Clone(write)
	badCRC[len(badCRC)-1] ^= 0xff
	crcNow := binary.BigEndian.Uint32(write[len(write)-4:])
	version := bytes.Clone(write)
	version[0] = 0x10
	unknownType := bytes.Clone(write)
	unknownType[1] = 0x04
	lyingHdrLen := bytes.Clone(write)
	lyingHdrLen[4] = 7
	records := bytes.Clone(ack)
	records[proto.CommonHeaderLen+4] = 19
	oneRecord := bytes.Clone(ack)
	oneRecord[proto.CommonHeaderLen+4] = 1
	oneRecordHdrLen := bytes.Clone(oneRecord)
	oneRecordHdrLen[4] = 24
	shortWrite := append(bytes.Clone(write[:36]), 0, 0, 0, 0)
	ackPayload := append(bytes.Clone(ack[:len(ack)-4]), 1, 2, 3, 4, 0, 0, 0, 0)
	beyond := build(t, proto.TypeWrite, 0, 8, func(p *proto.Packet) { p.Write().SetMsgLen(4) })
	connect := build(t, proto.TypeConnect, 0, proto.TokenLen, nil)
	shortToken := append(bytes.Clone(connect[:len(connect)-5]), 0, 0, 0, 0)

	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"truncated", make([]byte, 20), "truncated: 20 bytes, need at least 32"},
		{"bad CRC", badCRC, fmt.Sprintf("bad CRC: trailer 0x%08x, computed 0x%08x", crcNow^0xff, crcNow)},
		{"version", reseal(version), "unsupported version 1"},
		{"unknown type", reseal(unknownType), "unknown type 0x04 (reserved for SEND with immediate data"},
		{"lying HdrLen", reseal(lyingHdrLen), "header length: HdrLen 7 words = 28 bytes, type WRITE needs 60"},
		{"record count", reseal(records), "bad ACK record count: RecordCount 19, at most 18"},
		{"truncated header", reseal(shortWrite), "truncated: 40 bytes, type WRITE needs at least 64 (header 60 + trailer 4)"},
		{"ACK records not in HdrLen", reseal(oneRecord),
			"header length: HdrLen 11 words = 44 bytes, type ACK with 1 records needs 96"},
		{"ACK records missing", reseal(oneRecordHdrLen),
			"truncated: 48 bytes, type ACK with 1 records needs at least 100 (header 96 + trailer 4)"},
		{"payload on ACK", reseal(ackPayload), "payload not allowed: type ACK carries none, but 4 bytes"},
		{"payload beyond message", beyond, "MsgOffset 0 + payload 8 bytes = 8, beyond MsgLen 4"},
		{"CONNECT token cut", reseal(shortToken), "a CONNECT carries none or a 16-byte token, but 15 bytes"},
	}
	for _, tt := range tests {
		var p proto.Packet
		err := p.Decode(tt.b)
		if err == nil {
			t.Errorf("%s: decodes", tt.name)
			continue
		}
		if got := ExplainError(tt.b, err); !strings.Contains(got, tt.want) || !strings.HasSuffix(got, "["+err.(proto.Error).Name()+", spec section 9]") {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// fieldLine returns the line of out that prints field name, the first one
// after the line starting with part.
func fieldLine(t *testing.T, out, part, name string) string {
	t.Helper()
	inPart := false
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  "+part+", bytes") {
			inPart = true
			continue
		}
		if f := strings.Fields(l); inPart && len(f) > 0 && f[0] == name {
			return l
		}
	}
	t.Fatalf("no %s.%s line in:\n%s", part, name, out)
	return ""
}

// Fields says what a value means where the spec gives it a meaning. The
// cases cover the type's class, flags with reserved bits, a saturated
// backlog, times, a nonzero reserved byte, rate hints, NACK codes, CLOSE
// reasons and details, handshake modes and capabilities, and where a
// payload lies in its message.
func TestFieldMeanings(t *testing.T) {
	write := build(t, proto.TypeWrite, 0, 100, func(p *proto.Packet) {
		p.Common.SetFlags(proto.FlagAckRequest | 0x0001)
		p.Common.SetBacklog(0xFFFFFFFF)
		p.Common.SetTimestamp(1500)
		p.Write().SetMsgLen(1000)
		p.Write().SetMsgOffset(200)
		p.Common[7] = 0x5a // a reserved byte
		for i := range p.Payload {
			p.Payload[i] = byte(i)
		}
	})
	out := dissectOne(t, write)
	checks := []struct{ part, field, want string }{
		{"CommonHeader", "Type", "WRITE, data"},
		{"CommonHeader", "Flags", "AR|reserved(0x0001) [!] reserved flag bits set"},
		{"CommonHeader", "Backlog", "saturated: 274877906880 bytes or more unsent"},
		{"CommonHeader", "Timestamp", "1500 ns = 1.5µs"},
		{"CommonHeader", "reserved", "90  0x5a                [!] nonzero reserved field (byte 7)"},
		{"CommonHeader", "HdrLen", "15 words = 60 bytes"},
	}
	for _, c := range checks {
		if l := fieldLine(t, out, c.part, c.field); !strings.Contains(l, c.want) {
			t.Errorf("%s.%s: %q lacks %q", c.part, c.field, l, c.want)
		}
	}
	if !strings.Contains(out, "  Payload, bytes 60-159: 100 bytes: message bytes 200-299 of 1000\n"+
		"    00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f"+
		" ... (first 32 of 100 bytes)\n") {
		t.Errorf("payload:\n%s", out)
	}

	for _, c := range []struct {
		rate uint64
		want string
	}{{0, "0 = stop sending new data"}, {^uint64(0), "all ones = no limit"}, {2e11, "200000000000 bytes/s = 1600 Gb/s"}} {
		out := dissectOne(t, build(t, proto.TypeAck, 0, 0, func(p *proto.Packet) { p.Ack().SetRateHint(c.rate) }))
		if l := fieldLine(t, out, "AckHeader", "RateHint"); !strings.Contains(l, c.want) {
			t.Errorf("RateHint %d: %q lacks %q", c.rate, l, c.want)
		}
	}

	for code, want := range map[proto.NackCode]string{proto.NackRNR: "RNR, retryable", proto.NackBadKey: "BAD_KEY, fatal",
		0x42: "UNKNOWN(0x42): reserved code, treated as fatal"} {
		out := dissectOne(t, build(t, proto.TypeNack, 0, 0, func(p *proto.Packet) { p.Nack().SetCode(code) }))
		if l := fieldLine(t, out, "NackHeader", "Code"); !strings.Contains(l, want) {
			t.Errorf("NACK code %d: %q lacks %q", code, l, want)
		}
	}

	hs, _ := proto.LayoutOf("HandshakeHeader")
	for _, c := range []struct {
		reason      proto.CloseReason
		detail      uint32
		wantReason  string
		wantDetail  string
		detailIsSet bool
	}{
		{proto.CloseFatal, uint32(proto.NackBounds), "FATAL", "NACK code BOUNDS, fatal", true},
		{proto.CloseVersion, 3, "VERSION", "highest supported version 3", true},
		{proto.CloseParams, uint32(hs.Fields[4].Byte), "PARAMS", "of HandshakeHeader: " + hs.Fields[4].Name + " refused", true},
		{99, 0, "UNKNOWN(99): unknown reason, treated as NORMAL", "", false},
	} {
		out := dissectOne(t, build(t, proto.TypeClose, 0, 0, func(p *proto.Packet) {
			p.Close().SetReason(c.reason)
			p.Close().SetDetail(c.detail)
		}))
		if l := fieldLine(t, out, "CloseHeader", "Reason"); !strings.Contains(l, c.wantReason) {
			t.Errorf("CLOSE %d: %q lacks %q", c.reason, l, c.wantReason)
		}
		if l := fieldLine(t, out, "CloseHeader", "Detail"); c.detailIsSet && !strings.Contains(l, c.wantDetail) {
			t.Errorf("CLOSE %d detail: %q lacks %q", c.reason, l, c.wantDetail)
		}
	}

	connect := dissectOne(t, build(t, proto.TypeConnect, 0, 0, func(p *proto.Packet) {
		p.Handshake().SetMode(proto.ModeBaseline)
		p.Handshake().SetCapabilities(proto.CapAtomics | 0x100)
		p.Handshake().SetInboundCapacity(proto.CapacityUnknown)
	}))
	for field, want := range map[string]string{"Mode": "baseline", "InboundCapacity": "all ones = unknown",
		"Capabilities": "ATOMICS|reserved(0x00000100) [!] reserved capability bits set"} {
		if l := fieldLine(t, connect, "HandshakeHeader", field); !strings.Contains(l, want) {
			t.Errorf("CONNECT %s: %q lacks %q", field, l, want)
		}
	}

	// A RETRY's token, and the CONNECT that returns it.
	tok := [proto.TokenLen]byte{0xde, 0xad, 15: 0x01}
	retry := dissectOne(t, build(t, proto.TypeRetry, 0, 0, func(p *proto.Packet) { p.Retry().SetToken(tok) }))
	if !strings.Contains(retry, "    Token                     (128 bits)  dead0000000000000000000000000001\n"+
		"                                          opaque: the initiator returns it as its CONNECT's payload") {
		t.Errorf("RETRY:\n%s", retry)
	}
	withToken := dissectOne(t, build(t, proto.TypeConnect, 0, proto.TokenLen, func(p *proto.Packet) { copy(p.Payload, tok[:]) }))
	if !strings.Contains(withToken, "  Payload, bytes 72-87: 16 bytes: the token of a RETRY, returned unchanged (spec section 8.1)\n"+
		"    de ad 00 00 00 00 00 00 00 00 00 00 00 00 00 01\n") {
		t.Errorf("CONNECT with a token:\n%s", withToken)
	}
}

// An AckRecord's bitvector is summed up as the PSNs it reports missing,
// in ranges of serial order that may wrap, cut short after
// maxRangesShown.
func TestBitvectorSummary(t *testing.T) {
	rec := func(high uint32, received ...int) proto.AckRecord {
		r := make(proto.AckRecord, proto.AckRecordLen)
		r.SetHighestPSN(high)
		for _, k := range received {
			r.MarkReceived(k)
		}
		return r
	}
	all := make([]int, 256)
	for k := range all {
		all[k] = k
	}
	alternate := []int{}
	for k := 0; k < 256; k += 2 {
		alternate = append(alternate, k)
	}
	tests := []struct {
		name string
		r    proto.AckRecord
		want string
	}{
		{"all received", rec(1000, all...), "all 256 PSNs below HighestPSN received (744-999)"},
		{"one missing", rec(4096, all[:255]...), "missing 1 of the 256 PSNs below HighestPSN 4096: 3840"},
		// Bits 0, 1 and 3 are set, so PSNs 2, 1 and 0xffffffff arrived. PSN 0 and those from 0xfffffffe down were lost.
		{"wrapped high", rec(3, 0, 1, 3), "missing 253 of the 256 PSNs below HighestPSN 3: 4294967043-4294967294, 0"},
		// Bits 0-3 are clear and the rest set, so PSNs 0xfffffffe, 0xffffffff, 0 and 1 were lost.
		{"range across the wrap", rec(2, all[4:]...), "missing 4 of the 256 PSNs below HighestPSN 2: 4294967294-1 (wraps)"},
		{"none received", rec(0x100), "missing 256 of the 256 PSNs below HighestPSN 256: 0-255"},
		{"many ranges", rec(1000, alternate...), "missing 128 of the 256 PSNs below HighestPSN 1000: 744, 746, 748"},
	}
	for _, tt := range tests {
		got := bitvectorSummary(tt.r)
		if !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := bitvectorSummary(rec(1000, alternate...)); !strings.HasSuffix(got, ", and 112 more ranges") {
		t.Errorf("many ranges: %q is not cut short", got)
	}
}

// FuzzDissect holds the dissector to any input. It never panics, and
// every packet Decode refuses gets an explanation.
func FuzzDissect(f *testing.F) {
	f.Add(strings.Repeat("00", 32))
	f.Add("")
	for _, file := range goldenFiles(f) {
		text, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(text))
	}
	f.Fuzz(func(t *testing.T, text string) {
		b, err := hexfmt.Parse(text)
		if err != nil {
			b = []byte(text) // fuzz raw bytes too
		}
		// Decode as given, with the CRC made right so that later checks
		// are reached, and without the CRC check.
		inputs := [][]byte{b}
		if len(b) >= proto.TrailerLen {
			inputs = append(inputs, reseal(b))
		}
		for _, in := range inputs {
			for _, noCRC := range []bool{false, true} {
				var p proto.Packet
				err := p.Decode(in)
				if noCRC {
					err = p.DecodeNoCRC(in)
				}
				if err != nil {
					if msg := ExplainError(in, err); msg == "" {
						t.Fatalf("no explanation of %v", err)
					}
					continue
				}
				Summary(&p)
				Fields(io.Discard, &p, !noCRC)
			}
		}
	})
}

// A CONNECT or ACCEPT with AUTH whose payload is not its key exchange is
// explained by what the authenticated mode asks of it.
func TestExplainAuthHandshakePayload(t *testing.T) {
	for _, c := range []struct {
		typ  proto.Type
		n    int
		want string
	}{
		{proto.TypeConnect, proto.TokenLen, "AuthHello"},
		{proto.TypeAccept, 0, "48-byte AuthAccept"},
	} {
		var p proto.Packet
		if err := proto.Build(&p, make([]byte, 512), c.typ, 0, c.n); err != nil {
			t.Fatal(err)
		}
		p.Handshake().SetCapabilities(proto.CapAuth)
		b := p.Seal()
		var q proto.Packet
		err := q.Decode(b)
		if err != proto.ErrPayload {
			t.Fatalf("%v: %v", c.typ, err)
		}
		if got := ExplainError(b, err); !strings.Contains(got, c.want) || !strings.Contains(got, "13.3") {
			t.Errorf("%v: %q", c.typ, got)
		}
	}
}
