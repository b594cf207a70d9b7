package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mroce/mroce/internal/pcapio"
	"github.com/mroce/mroce/proto"
)

// goldenPcap is the committed capture of the golden packets that make
// golden writes.
const goldenPcap = "../../testdata/golden.pcap"

func TestGoldenPcap(t *testing.T) {
	golden := goldenPackets(t)
	out := filepath.Join(t.TempDir(), "golden.pcap")
	r := runCLI(t, "", "golden-pcap", goldenDir, out)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if want := fmt.Sprintf("%s: %d packets\n", out, len(golden)); r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(goldenPcap)
	if err != nil {
		t.Fatalf("%v: run `make golden` and commit testdata/golden.pcap", err)
	}
	if !bytes.Equal(got, committed) {
		t.Fatal("testdata/golden.pcap differs from what golden-pcap makes of testdata/golden/*.hex: " +
			"run `make golden` and commit it")
	}

	// It holds the golden packets, in file name order.
	pr, err := pcapio.NewReader(bytes.NewReader(committed), proto.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range golden {
		d, err := pr.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		if !bytes.Equal(d.Payload, g.bytes) {
			t.Errorf("frame %d is not %s", i+1, g.name)
		}
	}
	if _, err := pr.Next(); err != io.EOF {
		t.Errorf("after the last golden packet: %v", err)
	}
}

func TestGoldenPcapErrors(t *testing.T) {
	empty := t.TempDir()
	out := filepath.Join(t.TempDir(), "out.pcap")
	r := runCLI(t, "", "golden-pcap", empty, out)
	if r.code != 1 || !strings.Contains(r.stderr, "no .hex files in "+empty) {
		t.Errorf("empty directory: exit %d, stderr %q", r.code, r.stderr)
	}

	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "01-ok.hex"), []byte("00 12 00 00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "02-bad.hex"), []byte("# header\n00 12\n0g\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "", "golden-pcap", bad, out)
	if r.code != 1 || !strings.Contains(r.stderr, "02-bad.hex: line 3, column 1: bad hex token \"0g\"") {
		t.Errorf("bad hex: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an output file was written despite the error")
	}

	r = runCLI(t, "", "golden-pcap", goldenDir, filepath.Join(t.TempDir(), "no", "such", "dir", "out.pcap"))
	if r.code != 1 || !strings.Contains(r.stderr, "no such file or directory") {
		t.Errorf("unwritable output: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestTshark has Wireshark read testdata/golden.pcap and finds one frame
// per golden packet, each a UDP datagram to port 4797 whose UDP length is 8
// plus the packet's. CI sets MROCE_REQUIRE_TSHARK=1 so that it never skips there.
func TestTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("MROCE_REQUIRE_TSHARK") == "1" {
			t.Fatal("tshark is not on PATH and MROCE_REQUIRE_TSHARK=1")
		}
		t.Skip("tshark is not on PATH: skipping the Wireshark check of testdata/golden.pcap " +
			"(install tshark, or set MROCE_REQUIRE_TSHARK=1 to make this a failure)")
	}
	golden := goldenPackets(t)
	cmd := exec.Command(tshark, "-r", goldenPcap, "-T", "fields", "-e", "udp.dstport", "-e", "udp.length")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // no user profile
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(golden) {
		t.Fatalf("tshark read %d frames, want %d (one per golden packet):\n%s", len(lines), len(golden), out)
	}
	for i, g := range golden {
		want := fmt.Sprintf("%d\t%d", proto.DefaultPort, 8+len(g.bytes))
		if lines[i] != want {
			t.Errorf("frame %d (%s): tshark says %q, want %q", i+1, g.name, lines[i], want)
		}
	}

	// The IPv4 and UDP checksums verify, status 1 being "Good".
	cmd = exec.Command(tshark, "-r", goldenPcap, "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
		"-T", "fields", "-e", "ip.checksum.status", "-e", "udp.checksum.status")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	stderr.Reset()
	cmd.Stderr = &stderr
	if out, err = cmd.Output(); err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	for i, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if l != "1\t1" {
			t.Errorf("frame %d: IPv4 and UDP checksum status %q, want both 1 (good)", i+1, l)
		}
	}
}
