package main

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/dissect"
	"github.com/mroce/mroce/internal/hexfmt"
	"github.com/mroce/mroce/internal/pcapio"
	"github.com/mroce/mroce/proto"
)

// authVectors reads testdata/auth/vectors.txt.
func authVectors(t *testing.T) map[string][]byte {
	t.Helper()
	text, err := os.ReadFile("../../testdata/auth/vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	v, err := hexfmt.Named(string(text))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// mroce decode opens the vectors' protected packets with a key log and
// prints each as its golden, unprotected packet is printed, the key
// phase, the control sequence number and the tag aside. Without the log
// it prints their clear header and what is encrypted; with the log, a
// packet with a byte changed is malformed.
func TestDecodeWithKeyLog(t *testing.T) {
	v := authVectors(t)
	names := []string{"01-write", "02-write-imm", "03-send", "04-read-req", "05-read-resp", "06-ack", "07-nack", "08-cnp", "11-close", "12-probe", "13-probe-reply"}
	var log strings.Builder
	seen := map[uint32]bool{}
	var args []string
	for _, name := range names {
		sealed := v["psk.aes128gcm.packet."+name]
		id := proto.CommonHeader(sealed).DstConnID()
		if !seen[id] {
			seen[id] = true
			fmt.Fprintf(&log, "MROCE_SECRET %08x 1 %x\n", id, v["psk.aes128gcm.secret-i2a"])
		}
		args = append(args, hex.EncodeToString(sealed))
	}
	path := filepath.Join(t.TempDir(), "keys.log")
	if err := os.WriteFile(path, []byte("# a comment\n"+log.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", append([]string{"decode", "--key-log", path}, args...)...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	for i, name := range names {
		var plain proto.Packet
		if err := plain.Decode(goldenFile(t, name)); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("packet %d: %v (", i+1, plain.Type())
		if !strings.Contains(r.stdout, want) {
			t.Errorf("%s: no %q", name, want)
		}
		var fields strings.Builder
		dissect.Fields(&fields, &plain, true)
		// Every extension field and the payload read as in the golden packet.
		after := fields.String()[strings.Index(fields.String(), "\n  ")+1:]
		if _, rest, ok := strings.Cut(after, "Backlog"); !ok {
			t.Errorf("%s: no common header in the dissection", name)
		} else {
			rest = rest[strings.Index(rest, "\n")+1:]
			ext := rest[:strings.LastIndex(rest, "  Trailer")]
			if ext == "" || !strings.Contains(r.stdout, ext) {
				t.Errorf("%s: the opened packet's extensions and payload are not the golden packet's:\n%s", name, ext)
			}
		}
	}
	if n := strings.Count(r.stdout, "Opened with the key log: phase 0"); n != len(names) {
		t.Errorf("%d of %d packets opened", n, len(names))
	}
	// Without the key log: the clear header, the encrypted bytes, the tag.
	bare := runCLI(t, "", "decode", args[0])
	if bare.code != 0 || !strings.Contains(bare.stdout, "protected") || !strings.Contains(bare.stdout, "Encrypted, bytes 28-") ||
		!strings.Contains(bare.stdout, "DstConnID") || strings.Contains(bare.stdout, "RKey") {
		t.Errorf("without a key log: exit %d\n%s", bare.code, bare.stdout)
	}
	// A byte changed: it does not open.
	changed := v["psk.aes128gcm.packet.01-write"]
	changed[40] ^= 1
	bad := runCLI(t, "", "decode", "--key-log", path, hex.EncodeToString(changed))
	if bad.code != 1 || !strings.Contains(bad.stderr, "does not open") {
		t.Errorf("a changed packet: exit %d, stderr %q", bad.code, bad.stderr)
	}
	for _, c := range []string{"MROCE_SECRET 1234 1 00\n", "MROCE_SECRET 00001234 9 " + strings.Repeat("00", 32) + "\n", "# nothing\n"} {
		p := filepath.Join(t.TempDir(), "bad.log")
		os.WriteFile(p, []byte(c), 0o600)
		if r := runCLI(t, "", "decode", "--key-log", p, args[0]); r.code != 2 {
			t.Errorf("key log %q: exit %d, want 2 (%s)", c, r.code, r.stderr)
		}
	}
}

// goldenFile reads one golden packet by name.
func goldenFile(t *testing.T, name string) []byte {
	t.Helper()
	for _, g := range goldenPackets(t) {
		if g.name == name+".hex" {
			return g.bytes
		}
	}
	t.Fatalf("no golden packet %s", name)
	return nil
}

// Wireshark, with the dissector, shows a protected packet's clear common
// header, its encrypted bytes as one field and its tag, and none of its
// extensions' fields.
func TestWiresharkMarksProtectedPackets(t *testing.T) {
	v := authVectors(t)
	sealed := [][]byte{v["psk.aes128gcm.packet.01-write"], v["psk.aes128gcm.packet.06-ack"]}
	path := filepath.Join(t.TempDir(), "protected.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapio.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := netip.MustParseAddrPort("192.0.2.1:49152"), netip.MustParseAddrPort("192.0.2.2:4797")
	for _, b := range sealed {
		if err := w.WriteDatagram(time.Unix(0, 0), src, dst, 26, pcapio.ECN(0), b); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	doc := dissectInTshark(t, path)
	if len(doc.Packets) != len(sealed) {
		t.Fatalf("tshark shows %d frames, %d were written", len(doc.Packets), len(sealed))
	}
	for i, b := range sealed {
		fields := map[string]pdmlField{}
		for _, fl := range mroceFields(doc.Packets[i].Protos) {
			fields[fl.Name] = fl
		}
		enc := hex.EncodeToString(b[proto.CommonHeaderLen : len(b)-proto.TagLen])
		tag := hex.EncodeToString(b[len(b)-proto.TagLen:])
		if fields["mroce.commonheader.protected"].Show != "1" || fields["mroce.encrypted"].Value != enc || fields["mroce.tag.tag"].Value != tag {
			t.Errorf("frame %d: protected %q, encrypted %q, tag %q", i+1, fields["mroce.commonheader.protected"].Show, fields["mroce.encrypted"].Value, fields["mroce.tag.tag"].Value)
		}
		for name := range fields {
			if !strings.HasPrefix(name, "mroce.commonheader.") && name != "mroce.encrypted" && name != "mroce.tag.tag" {
				t.Errorf("frame %d: a field of the encrypted part is shown: %s", i+1, name)
			}
		}
	}
}
