package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mroce/mroce/dissect"
	"github.com/mroce/mroce/internal/hexfmt"
	"github.com/mroce/mroce/internal/pcapio"
	"github.com/mroce/mroce/proto"
)

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
			var fields strings.Builder
			dissect.Fields(&fields, &p, true)
			if want := "packet 1: " + dissect.Summary(&p) + "\n  Input: standard input, line 1\n" + fields.String() + "\n"; r.stdout != want {
				t.Errorf("stdout:\n%s\nwant the dissection:\n%s", r.stdout, want)
			}
			// As an argument, the packet gives the same fields.
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

// A malformed packet, as a receiver finds it or as hex, is reported on
// standard error with what is wrong and the count. Nothing is printed for
// it and the exit status is 1. The dissect package's tests hold the
// explanations of every check.
func TestDecodeMalformed(t *testing.T) {
	write := build(t, proto.TypeWrite, 0, 8, func(p *proto.Packet) { p.Write().SetMsgLen(8) })
	badCRC := bytes.Clone(write)
	badCRC[len(badCRC)-1] ^= 0xff
	crcNow := binary.BigEndian.Uint32(write[len(write)-4:])

	tests := []struct {
		name string
		arg  string
		want string
	}{
		{"truncated", strings.Repeat("00", 20), "truncated: 20 bytes, need at least 32"},
		{"bad CRC", hexfmt.Format(badCRC), fmt.Sprintf("bad CRC: trailer 0x%08x, computed 0x%08x", crcNow^0xff, crcNow)},
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

	// On another port every frame is skipped and nothing is malformed.
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

	// A frame cut by the snap length is reported, not decoded.
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
