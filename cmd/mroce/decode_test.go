package main

import (
	"bufio"
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
	"github.com/mroce/mroce/internal/pcapio"
	"github.com/mroce/mroce/proto"
)

// checkFields checks that out prints every part of p in order, each with
// every non-reserved field of the part on its own line after the part's
// title, with the field's decimal value (its hex digits for fields wider
// than 64 bits).
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

func TestDecodeGolden(t *testing.T) {
	golden := goldenPackets(t)
	for _, g := range golden {
		t.Run(g.name, func(t *testing.T) {
			var p proto.Packet
			if err := p.Decode(g.bytes); err != nil {
				t.Fatalf("golden packet does not decode: %v", err)
			}
			// From standard input, as `mroce decode < file`.
			r := runCLI(t, g.text, "decode")
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			if !strings.HasPrefix(r.stdout, "packet 1: "+p.Type().String()+" (") {
				t.Errorf("first line: %q", strings.SplitN(r.stdout, "\n", 2)[0])
			}
			checkFields(t, g.name, r.stdout, &p)
			if !strings.Contains(r.stdout, "CRC32C ok") {
				t.Errorf("CRC not reported ok:\n%s", r.stdout)
			}
			// As an argument: the same fields.
			arg := runCLI(t, "", "decode", g.text)
			if arg.code != 0 || arg.stderr != "" {
				t.Fatalf("as argument: exit %d, stderr %q", arg.code, arg.stderr)
			}
			withoutInput := strings.Replace(r.stdout, "  Input: standard input, line 1\n", "", 1)
			if arg.stdout != withoutInput {
				t.Errorf("argument and standard input decode differently:\n%s\n---\n%s", arg.stdout, r.stdout)
			}
		})
	}
	// All of them on standard input, blank-line separated.
	var all strings.Builder
	for _, g := range golden {
		all.WriteString(g.text + "\n\n")
	}
	r := runCLI(t, all.String(), "decode")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("all golden packets: exit %d, stderr %q", r.code, r.stderr)
	}
	for i := range golden {
		if !strings.Contains(r.stdout, fmt.Sprintf("\npacket %d: ", i+1)) && (i > 0 || !strings.HasPrefix(r.stdout, "packet 1: ")) {
			t.Errorf("all golden packets: packet %d missing", i+1)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	write := build(t, proto.TypeWrite, 0, 8, func(p *proto.Packet) { p.Write().SetMsgLen(8) })
	ack := build(t, proto.TypeAck, 0, 0, nil)
	badCRC := bytes.Clone(write)
	badCRC[len(badCRC)-1] ^= 0xff
	crcNow := binary.BigEndian.Uint32(write[len(write)-4:])
	version := bytes.Clone(write)
	version[0] = 0x10
	unknownType := bytes.Clone(write)
	unknownType[1] = 0x07
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

	tests := []struct {
		name string
		arg  string
		want string
	}{
		{"truncated", strings.Repeat("00", 20), "truncated: 20 bytes, need at least 32"},
		{"bad CRC", hexfmt.Format(badCRC), fmt.Sprintf("bad CRC: trailer 0x%08x, computed 0x%08x", crcNow^0xff, crcNow)},
		{"version", hexfmt.Format(reseal(version)), "unsupported version 1"},
		{"unknown type", hexfmt.Format(reseal(unknownType)), "unknown type 0x07"},
		{"lying HdrLen", hexfmt.Format(reseal(lyingHdrLen)), "header length: HdrLen 7 words = 28 bytes, type WRITE needs 60"},
		{"record count", hexfmt.Format(reseal(records)), "bad ACK record count: RecordCount 19, at most 18"},
		{"truncated header", hexfmt.Format(reseal(shortWrite)), "truncated: 40 bytes, type WRITE needs at least 64 (header 60 + trailer 4)"},
		{"ACK records not in HdrLen", hexfmt.Format(reseal(oneRecord)),
			"header length: HdrLen 11 words = 44 bytes, type ACK with 1 records needs 96"},
		{"ACK records missing", hexfmt.Format(reseal(oneRecordHdrLen)),
			"truncated: 48 bytes, type ACK with 1 records needs at least 100 (header 96 + trailer 4)"},
		{"payload on ACK", hexfmt.Format(reseal(ackPayload)), "payload not allowed: type ACK carries none, but 4 bytes"},
		{"payload beyond message", hexfmt.Format(beyond), "MsgOffset 0 + payload 8 bytes = 8, beyond MsgLen 4"},
		{"garbage hex", "00 01 zz", `bad hex token "zz": non-hex character 'z'`},
		{"odd hex", "0x123", "odd number of hex digits"},
		{"no bytes", "# nothing", "no hex bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, "", "decode", tt.arg)
			if r.code != 1 {
				t.Errorf("exit %d, want 1", r.code)
			}
			if !strings.HasPrefix(r.stderr, "mroce: packet 1") || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q, want %q", r.stderr, tt.want)
			}
			if !strings.Contains(r.stderr, "1 of 1 packets malformed") {
				t.Errorf("stderr %q lacks the count", r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

func TestDecodeKeepsGoing(t *testing.T) {
	good := hexfmt.Format(build(t, proto.TypeCNP, 0, 0, nil))
	r := runCLI(t, "", "decode", good, "00 11", good)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1", r.code)
	}
	if !strings.Contains(r.stdout, "packet 1: CNP") || !strings.Contains(r.stdout, "packet 3: CNP") ||
		strings.Contains(r.stdout, "packet 2") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "mroce: packet 2: truncated: 2 bytes") || !strings.Contains(r.stderr, "1 of 3 packets malformed") {
		t.Errorf("stderr %q", r.stderr)
	}

	// On standard input, errors name the line of the block.
	stdin := good + "\n# second\n00 zz\n\n" + good
	r = runCLI(t, stdin, "decode")
	if r.code != 1 || !strings.Contains(r.stderr, "packet 2 (standard input, line 4): line 5, column 4: bad hex token \"zz\"") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "packet 3: CNP") || !strings.Contains(r.stdout, "Input: standard input, line 7") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
}

func TestDecodeNoCRC(t *testing.T) {
	p := build(t, proto.TypeCNP, 0, 0, nil)
	computed := binary.BigEndian.Uint32(p[len(p)-4:])
	p[len(p)-4] ^= 0x80
	r := runCLI(t, "", "decode", "--no-crc", hexfmt.Format(p))
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"CRC32C trailers are not checked (--no-crc).\n\npacket 1: CNP", "not checked (--no-crc)", fmt.Sprintf("the CRC32C of the packet is 0x%08x", computed),
		"packet 1: CNP"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	// Other checks still run.
	r = runCLI(t, "", "decode", "--no-crc", strings.Repeat("00", 32))
	if r.code != 1 || !strings.Contains(r.stderr, "unknown type 0x00") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	// A matching CRC is said to match.
	r = runCLI(t, "", "decode", "--no-crc", hexfmt.Format(build(t, proto.TypeCNP, 0, 0, nil)))
	if r.code != 0 || !strings.Contains(r.stdout, "it matches the CRC32C of the packet") {
		t.Errorf("exit %d, stdout:\n%s", r.code, r.stdout)
	}
}

// decodeOne decodes packet b with the tool and returns its output.
func decodeOne(t *testing.T, b []byte) string {
	t.Helper()
	r := runCLI(t, "", "decode", hexfmt.Format(b))
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	return r.stdout
}

// fieldLine returns the line of out that prints field name (the first one
// after the line starting with part).
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

func TestDecodeMeanings(t *testing.T) {
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
	out := decodeOne(t, write)
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
		out := decodeOne(t, build(t, proto.TypeAck, 0, 0, func(p *proto.Packet) { p.Ack().SetRateHint(c.rate) }))
		if l := fieldLine(t, out, "AckHeader", "RateHint"); !strings.Contains(l, c.want) {
			t.Errorf("RateHint %d: %q lacks %q", c.rate, l, c.want)
		}
	}

	for code, want := range map[proto.NackCode]string{proto.NackRNR: "RNR, retryable", proto.NackBadKey: "BAD_KEY, fatal",
		0x42: "UNKNOWN(0x42): reserved code, treated as fatal"} {
		out := decodeOne(t, build(t, proto.TypeNack, 0, 0, func(p *proto.Packet) { p.Nack().SetCode(code) }))
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
		out := decodeOne(t, build(t, proto.TypeClose, 0, 0, func(p *proto.Packet) {
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

	connect := decodeOne(t, build(t, proto.TypeConnect, 0, 0, func(p *proto.Packet) {
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
}

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
		// Bits 0, 1, 3 set: PSNs 2, 1, 0xffffffff received; 0 and 0xfffffffe down lost.
		{"wrapped high", rec(3, 0, 1, 3), "missing 253 of the 256 PSNs below HighestPSN 3: 4294967043-4294967294, 0"},
		// Bits 0-3 clear, the rest set: PSNs 0xfffffffe, 0xffffffff, 0, 1 lost.
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

// writeCapture writes packets as the pcap WritePackets makes to a temporary
// file and returns its name.
func writeCapture(t *testing.T, packets ...[]byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := pcapio.WritePackets(&buf, packets); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(t.TempDir(), "capture.pcap")
	if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestDecodePcap(t *testing.T) {
	write := build(t, proto.TypeWrite, 0, 16, func(p *proto.Packet) { p.Write().SetMsgLen(16) })
	bad := bytes.Clone(write)
	bad[len(bad)-1] ^= 1
	cnp := build(t, proto.TypeCNP, 0, 0, nil)
	file := writeCapture(t, write, bad, cnp)

	r := runCLI(t, "", "decode", "--pcap", file)
	if r.code != 1 {
		t.Errorf("exit %d, want 1 for the bad frame", r.code)
	}
	for _, want := range []string{
		"frame 1: WRITE (data), 80 bytes = header 60 + payload 16 + trailer 4\n",
		"  Capture: 2026-01-01T00:00:00.000000000Z, 192.0.2.1:49152 -> 192.0.2.2:4797, DSCP 26 (AF31), ECN ECT(0)\n",
		"frame 3: CNP (control), 32 bytes",
		"  Capture: 2026-01-01T00:00:00.002000000Z, 192.0.2.1:49154 -> 192.0.2.2:4797, DSCP 48 (CS6), ECN Not-ECT\n",
		"3 frames: 3 UDP datagrams to or from port 4797, 0 other frames skipped\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "frame 2") {
		t.Errorf("the bad frame was printed:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "mroce: frame 2 (192.0.2.1:49153 -> 192.0.2.2:4797): bad CRC: trailer") ||
		!strings.Contains(r.stderr, "1 of 3 packets malformed") {
		t.Errorf("stderr %q", r.stderr)
	}

	// Another port: every frame skipped, nothing malformed.
	r = runCLI(t, "", "decode", "--pcap", file, "--port", "4791")
	if r.code != 0 || r.stdout != "3 frames: 0 UDP datagrams to or from port 4791, 3 other frames skipped\n" {
		t.Errorf("--port 4791: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The source port matches too.
	r = runCLI(t, "", "decode", "--pcap", file, "--port", "49154")
	if r.code != 0 || !strings.Contains(r.stdout, "frame 3: CNP") || !strings.Contains(r.stdout, "1 UDP datagrams") {
		t.Errorf("--port 49154: exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestDecodePcapErrors(t *testing.T) {
	dir := t.TempDir()
	notPcap := filepath.Join(dir, "text.pcap")
	if err := os.WriteFile(notPcap, []byte("this is not a capture at all, just some text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "decode", "--pcap", notPcap)
	if r.code != 1 || !strings.Contains(r.stderr, "not a pcap or pcapng file") {
		t.Errorf("not a pcap: exit %d, stderr %q", r.code, r.stderr)
	}

	// A frame cut by the snap length: reported, not decoded.
	file := writeCapture(t, build(t, proto.TypeProbe, 0, 100, nil))
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	const cut = 50
	le := binary.LittleEndian
	le.PutUint32(data[24+8:], le.Uint32(data[24+8:])-cut) // the record's captured length
	if err := os.WriteFile(file, data[:len(data)-cut], 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "", "decode", "--pcap", file)
	if r.code != 1 || !strings.Contains(r.stderr, "frame 1 (192.0.2.1:49152 -> 192.0.2.2:4797): the capture holds 86 of the datagram's 136 bytes") {
		t.Errorf("cut frame: exit %d, stderr %q", r.code, r.stderr)
	}

	// A file that ends inside a record.
	file = writeCapture(t, build(t, proto.TypeCNP, 0, 0, nil), build(t, proto.TypeCNP, 0, 0, nil))
	data, _ = os.ReadFile(file)
	if err := os.WriteFile(file, data[:len(data)-5], 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "", "decode", "--pcap", file)
	if r.code != 1 || !strings.Contains(r.stdout, "frame 1: CNP") || !strings.Contains(r.stderr, "frame 2:") {
		t.Errorf("cut file: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(strings.Repeat("00", 32))
	f.Add("")
	for _, file := range mustGlob(f, filepath.Join(goldenDir, "*.hex")) {
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
		// Decode as given, with the CRC made right (so that later checks
		// are reached), and without the CRC check.
		inputs := [][]byte{b}
		if len(b) >= proto.TrailerLen {
			inputs = append(inputs, reseal(b))
		}
		for _, in := range inputs {
			for _, noCRC := range []bool{false, true} {
				d := &decoder{out: bufio.NewWriter(io.Discard), errOut: io.Discard, noCRC: noCRC}
				d.decodePacket("packet 1", "", in, nil)
				var p proto.Packet
				if err := p.DecodeNoCRC(in); err != nil {
					if msg := explainDecodeError(in, err); msg == "" || strings.HasPrefix(msg, "mroce:") {
						t.Fatalf("explanation %q of %v", msg, err)
					}
				}
			}
		}
	})
}

func mustGlob(f *testing.F, pattern string) []string {
	files, err := filepath.Glob(pattern)
	if err != nil {
		f.Fatal(err)
	}
	return files
}
