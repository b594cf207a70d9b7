//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"--planes", "2", "--loss", "0,0.5,10", "--tcp", "pinned,1", "--cc", "cubic", "--runs", "mroce"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(c.losses) != "[0 0.005 0.1]" || fmt.Sprint(c.tcpConns) != "[2 1]" || !c.runs["mroce"] || c.runs["tcp"] {
		t.Errorf("parsed %+v", c)
	}
	if !strings.HasPrefix(c.prefix, "kbench-") || c.offloads != "off" {
		t.Errorf("defaults: prefix %q, offloads %q", c.prefix, c.offloads)
	}
	for _, bad := range [][]string{
		{"--loss", "100"}, {"--loss", "x"}, {"--tcp", "2"}, {"--runs", "udp"}, {"--planes", "17"},
		{"--offloads", "on"}, {"--prefix", "a/b"}, {"extra"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// The router's rules: a counted rule per plane and direction, loss only
// when asked for, CE only towards the receiver.
func TestRules(t *testing.T) {
	tb := newTestbed(bedConfig{prefix: "x-", planes: 2})
	r := tb.rules(0, 0)
	if strings.Contains(r, "drop") || strings.Contains(r, "ecn") || strings.Count(r, "counter") != 4 {
		t.Errorf("loss-free rules:\n%s", r)
	}
	r = tb.rules(0.05, 0.01)
	for _, want := range []string{
		`iifname "s1" numgen random mod 1000000 < 50000 counter drop comment "lost to-receiver p1"`,
		`iifname "r0" numgen random mod 1000000 < 50000 counter drop comment "lost to-sender p0"`,
		`iifname "s0" ip ecn { ect0, ect1 } numgen random mod 1000000 < 10000 counter ip ecn set ce`,
	} {
		if !strings.Contains(r, want) {
			t.Errorf("rules lack %s:\n%s", want, r)
		}
	}
	if strings.Contains(r, `iifname "r0" ip ecn`) {
		t.Errorf("CE marks towards the sender:\n%s", r)
	}
}

func TestBytesAt(t *testing.T) {
	s := [][2]int64{{1000, 0}, {2000, 100}, {3000, 300}}
	for _, c := range []struct{ ns, want int64 }{{500, 0}, {1000, 0}, {1500, 50}, {2500, 200}, {3000, 300}, {9000, 300}} {
		if got := bytesAt(s, time.Unix(0, c.ns)); got != c.want {
			t.Errorf("at %d: %d, want %d", c.ns, got, c.want)
		}
	}
	if got := string(lastLine([]byte("ready\n{\"bytes\":1}\n"))); got != `{"bytes":1}` {
		t.Errorf("lastLine: %q", got)
	}
}

// needNetAdmin skips the test unless it runs as root with iproute2, tc and
// nftables. With MROCE_REQUIRE_NETADMIN set, as in CI, it fails instead.
func needNetAdmin(t *testing.T) {
	t.Helper()
	missing := os.Geteuid() != 0
	for _, tool := range []string{"ip", "tc", "nft", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = true
		}
	}
	if missing {
		msg := "needs root, ip and tc (iproute2), nft (nftables) and ethtool"
		if os.Getenv("MROCE_REQUIRE_NETADMIN") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// build builds kbench and mroce into a directory of the test's.
func build(t *testing.T) (kbench, mroce string) {
	t.Helper()
	dir := t.TempDir()
	kbench, mroce = filepath.Join(dir, "kbench"), filepath.Join(dir, "mroce")
	for _, b := range [][2]string{{kbench, "."}, {mroce, "github.com/mroce/mroce/cmd/mroce"}} {
		if out, err := exec.Command("go", "build", "-o", b[0], b[1]).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v: %s", b[1], err, out)
		}
	}
	return kbench, mroce
}

// prefix is a prefix no other run uses.
func prefix() string { return fmt.Sprintf("kbt%d-%d-", os.Getpid(), rand.IntN(1e6)) }

// noneLeft fails the test if a namespace of the prefix is left.
func noneLeft(t *testing.T, prefix string) {
	t.Helper()
	left, err := namespacesWithPrefix(prefix)
	if err != nil || len(left) > 0 {
		t.Errorf("left behind: %v (%v)", left, err)
	}
}

// A small sitting: 2 planes of 100 Mbit/s, mroce and one cubic TCP
// connection at 0% and 5% loss. Its JSON parses, every run moved data
// and the router lost about what it was set to, and nothing of the
// testbed is left. Then a sitting stopped by SIGTERM removes its testbed.
func TestLargeKernelBench(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a namespace testbed and runs transfers in real time: with the large tests")
	}
	needNetAdmin(t)
	kbench, mroce := build(t)
	p := prefix()
	cmd := exec.Command(kbench, "--mroce", mroce, "--planes", "2", "--rate-mbit", "100", "--loss", "0,5", "--size-mib", "8",
		"--max-seconds", "8", "--cc", "cubic", "--tcp", "1", "--runs", "mroce,tcp", "--prefix", p, "--json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	noneLeft(t, p)
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == exitNoBed && os.Getenv("MROCE_REQUIRE_NETADMIN") == "" {
		t.Skipf("no testbed here (namespaces, veth, tbf or nftables): %s", stderr.String())
	}
	if err != nil {
		t.Fatalf("kbench: %v\n%s\n%s", err, stderr.String(), out)
	}
	var doc struct {
		Testbed testbedDoc `json:"testbed"`
		Runs    []result   `json:"runs"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("the JSON: %v\n%s", err, out)
	}
	if doc.Testbed.Planes != 2 || doc.Testbed.RateMbit != 100 || doc.Testbed.Offloads != "off" || doc.Testbed.Prefix != p {
		t.Errorf("testbed %+v", doc.Testbed)
	}
	var kinds []string
	for _, r := range doc.Runs {
		kinds = append(kinds, fmt.Sprintf("%s/%s/%d/%g", r.Kind, r.CC, r.Conns, r.Loss))
		if r.Error != "" || r.Bytes <= 0 || r.Gbps <= 0 || r.CPUSender <= 0 || r.CPUReceiver <= 0 || r.Router.Seen == 0 {
			t.Errorf("%s: %+v", r.label(), r)
		}
		if r.Gbps > 0.2*1.02 {
			t.Errorf("%s: %.3f Gb/s over two planes of 100 Mbit/s", r.label(), r.Gbps)
		}
		lost := float64(r.Router.Lost) / float64(max(r.Router.Seen, 1))
		if r.Loss == 0 && lost != 0 || r.Loss > 0 && (lost < r.Loss/2 || lost > r.Loss*2) {
			t.Errorf("%s at %g: the router lost %.4f", r.label(), r.Loss, lost)
		}
		if r.Kind == "mroce" && r.Conns == 1 && !r.Capped && !r.Verified {
			t.Errorf("%s: not verified", r.label())
		}
	}
	if got := strings.Join(kinds, " "); got != "mroce//1/0 tcp/cubic/1/0 mroce//1/0.05 tcp/cubic/1/0.05" {
		t.Errorf("runs: %s", got)
	}

	// Stopped part way, it still removes everything and says it was
	// interrupted.
	p = prefix()
	cmd = exec.Command(kbench, "--mroce", mroce, "--planes", "2", "--rate-mbit", "100", "--loss", "0", "--size-mib", "64",
		"--cc", "cubic", "--tcp", "1", "--runs", "mroce,tcp", "--prefix", p)
	stderr.Reset()
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(mustList(t, p)) < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // into the mroce transfer
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("kbench stopped by SIGTERM: %v\n%s", err, stderr.String())
	}
	noneLeft(t, p)
}

func mustList(t *testing.T, prefix string) []string {
	t.Helper()
	l, err := namespacesWithPrefix(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
