package main

import (
	"bytes"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mroce/mroce/proto"
)

const dissectorPath = "../../tools/wireshark/mroce.lua"

// The committed dissector is what mroce wireshark-lua writes from the
// spec's layout tables. make wireshark regenerates it.
func TestDissectorIsGenerated(t *testing.T) {
	var b bytes.Buffer
	if err := writeDissector(&b); err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(dissectorPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, b.Bytes()) {
		t.Fatal("tools/wireshark/mroce.lua is not what mroce wireshark-lua writes: run make wireshark")
	}
}

// pdml is the part of tshark's PDML output the test reads.
type pdml struct {
	Packets []struct {
		Protos []pdmlProto `xml:"proto"`
	} `xml:"packet"`
}

type pdmlProto struct {
	Name   string      `xml:"name,attr"`
	Fields []pdmlField `xml:"field"`
	Protos []pdmlProto `xml:"proto"`
}

type pdmlField struct {
	Name  string `xml:"name,attr"`
	Show  string `xml:"show,attr"`
	Value string `xml:"value,attr"`
}

// dissectInTshark runs tshark with the dissector over a capture and
// returns what it shows. Without tshark the test is skipped, unless
// MROCE_REQUIRE_TSHARK=1, as CI sets it.
func dissectInTshark(t *testing.T, capture string) pdml {
	t.Helper()
	out := runTshark(t, capture, "-T", "pdml")
	var doc pdml
	if err := xml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("tshark's PDML: %v", err)
	}
	return doc
}

// runTshark runs tshark with the dissector over a capture and returns its
// output. Without tshark the test is skipped, unless
// MROCE_REQUIRE_TSHARK=1, as CI sets it.
func runTshark(t *testing.T, capture string, args ...string) []byte {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("MROCE_REQUIRE_TSHARK") == "1" {
			t.Fatal("tshark is not on PATH and MROCE_REQUIRE_TSHARK=1")
		}
		t.Skip("tshark is not on PATH: skipping the dissector test (install tshark)")
	}
	cmd := exec.Command(tshark, append([]string{"-X", "lua_script:" + dissectorPath, "-r", capture}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	return out
}

// tsharkRows runs tshark over a capture and returns, per frame, its
// protocol column, its UDP ports and its Info column.
func tsharkRows(t *testing.T, capture string) [][]string {
	t.Helper()
	out := runTshark(t, capture, "-T", "fields", "-E", "separator=/t", "-e", "_ws.col.Protocol", "-e", "udp.srcport", "-e", "udp.dstport", "-e", "_ws.col.Info")
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		rows = append(rows, strings.Split(line, "\t"))
	}
	return rows
}

// The dissector takes both directions of a conversation, whatever their
// ports, and names what each packet is in the Info column: a golden
// capture of send and recv, whose acceptor answers from its source ports
// to the initiator's, and a capture of a transfer through the relay at 3%
// loss, whose ACKs report PSNs lost.
func TestWiresharkBothDirections(t *testing.T) {
	rows := tsharkRows(t, "../../testdata/apps/send.pcap")
	var infos []string
	for i, r := range rows {
		if len(r) != 4 || r[0] != "MROCE" {
			t.Fatalf("frame %d of the send capture: %q, want MROCE", i+1, r)
		}
		infos = append(infos, r[3])
	}
	all := strings.Join(infos, "\n")
	for _, want := range []string{"CONNECT", "ACCEPT", "SEND path 0 PSN", "ACK CumDSN", "CLOSE NORMAL detail 0"} {
		if !strings.Contains(all, want) {
			t.Errorf("no Info %q in the send capture:\n%s", want, all)
		}
	}
	if len(rows) < 30 {
		t.Errorf("%d frames dissected", len(rows))
	}

	capture := filepath.Join(t.TempDir(), "lossy.pcap")
	sendThroughRelay(t, 0.03, "--pcap", capture)
	rows = tsharkRows(t, capture)
	lost := 0
	for i, r := range rows {
		if len(r) != 4 || r[0] != "MROCE" {
			t.Fatalf("frame %d of the lossy capture: %q, want MROCE", i+1, r)
		}
		if strings.Contains(r[3], "PSNs lost") {
			lost++
		}
	}
	if lost == 0 {
		t.Fatalf("no ACK of %d frames reports PSNs lost at 3%% loss", len(rows))
	}
}

// mroceFields lists the mroce fields of a dissected frame, in order.
func mroceFields(ps []pdmlProto) []pdmlField {
	var out []pdmlField
	for _, p := range ps {
		for _, f := range p.Fields {
			if strings.HasPrefix(f.Name, "mroce.") {
				out = append(out, f)
			}
		}
		out = append(out, mroceFields(p.Protos)...)
	}
	return out
}

// Wireshark, with the dissector, reads every field of every golden packet
// as mroce decode does, the same fields in the same order with the same
// values, the bitvector and the payload byte for byte.
func TestWiresharkDissector(t *testing.T) {
	doc := dissectInTshark(t, goldenPcap)
	golden := goldenPackets(t)
	if len(doc.Packets) != len(golden) {
		t.Fatalf("tshark read %d frames, there are %d golden packets", len(doc.Packets), len(golden))
	}
	for i, g := range golden {
		var p proto.Packet
		if err := p.Decode(g.bytes); err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		var want []pdmlField
		for _, s := range p.Sections() {
			for _, f := range s.Layout.Fields {
				if f.Reserved() {
					continue
				}
				name := "mroce." + strings.ToLower(s.Layout.Name) + "." + strings.ToLower(f.Name)
				if f.Width > 64 {
					want = append(want, pdmlField{Name: name, Value: hex.EncodeToString(s.Bytes[f.Byte : f.Byte+f.Width/8])})
				} else {
					want = append(want, pdmlField{Name: name, Show: fmt.Sprint(f.Uint(s.Bytes))})
				}
			}
		}
		got := mroceFields(doc.Packets[i].Protos)
		var payload, crc string
		kept := got[:0]
		for _, f := range got {
			switch f.Name {
			case "mroce.payload":
				payload = f.Value
				continue
			case "mroce.crc_status", "mroce.ackrecord.holes": // what the dissector works out, not a field of the wire
				crc += f.Show
				continue
			}
			kept = append(kept, f)
		}
		if !strings.Contains(crc, "good") {
			t.Errorf("%s: CRC status %q, want good", g.name, crc)
		}
		got = kept
		wantPayload := p.Payload // what follows the key exchange, which is a part of its own
		if h, ok := p.AuthHello(); ok {
			wantPayload = wantPayload[len(h):]
		}
		if _, ok := p.AuthAccept(); ok {
			wantPayload = nil
		}
		if hex.EncodeToString(wantPayload) != payload {
			t.Errorf("%s: payload %q, want %x", g.name, payload, wantPayload)
		}
		if len(got) != len(want) {
			t.Errorf("%s: tshark shows %d fields, mroce decode %d", g.name, len(got), len(want))
			continue
		}
		for k := range want {
			w, f := want[k], got[k]
			ok := f.Name == w.Name && (w.Value != "" && f.Value == w.Value || w.Value == "" && f.Show == w.Show)
			if !ok {
				t.Errorf("%s: field %d is %s = %s/%s; want %s = %s%s", g.name, k, f.Name, f.Show, f.Value, w.Name, w.Show, w.Value)
			}
		}
	}
}
