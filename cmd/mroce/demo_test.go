package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mroce/mroce/tracelog"
)

// The demo moves its data through the emulator, verifies it, and reports
// goodput, losses and every path.
func TestDemo(t *testing.T) {
	r := runCLI(t, "", "demo", "--size-mib", "4", "--loss", "0.05", "--paths", "6", "--planes", "3")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"over 6 paths on 3 planes", "data verified: SHA-256", "retransmissions per loss", "path  plane  src port"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	m := regexp.MustCompile(`(\d+) lost in the fabric, (\d+) retransmitted`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no loss line:\n%s", r.stdout)
	}
	lost, _ := strconv.Atoi(m[1])
	if lost == 0 {
		t.Errorf("5%% loss lost nothing:\n%s", r.stdout)
	}
	if rows := regexp.MustCompile(`(?m)^\s+\d+\s+\d+\s+\d+\s+GOOD`).FindAllString(r.stdout, -1); len(rows) != 6 {
		t.Errorf("%d path rows, want 6:\n%s", len(rows), r.stdout)
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--loss", "2"},
		{"demo", "--planes", "0"},
		{"demo", "--paths", "300"},
		{"demo", "--size-mib", "0"},
		{"demo", "--rate-gbps", "-1"},
	} {
		r := runCLI(t, "", args...)
		if r.code != 2 || !strings.Contains(r.stderr, "demo: --") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

// demo --json prints one document with the configuration, intervals in
// virtual time that add up to what the paths sent, the end with the data
// verified, and a row per path.
func TestDemoJSON(t *testing.T) {
	r := runCLI(t, "", "demo", "--json", "--size-mib", "8", "--interval", "20us")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var doc struct {
		Config struct {
			Size  int `json:"size"`
			Paths int `json:"paths"`
		} `json:"config"`
		Intervals []struct {
			Bytes int64 `json:"bytes"`
		} `json:"intervals"`
		End struct {
			Verified bool    `json:"verified"`
			Gbps     float64 `json:"gbps"`
		} `json:"end"`
		Paths []struct {
			Packets uint64 `json:"packets"`
		} `json:"paths_detail"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	var sum int64
	for _, iv := range doc.Intervals {
		sum += iv.Bytes
	}
	if !doc.End.Verified || doc.End.Gbps <= 0 || doc.Config.Size != 8<<20 || len(doc.Paths) != doc.Config.Paths || len(doc.Intervals) < 2 ||
		sum < 8<<20 {
		t.Fatalf("%+v (intervals add up to %d bytes)", doc, sum)
	}
}

// demo --trace writes the engine's decisions, and mroce trace sums them
// up and draws the time-sequence plot, losses among them at 1% loss.
func TestDemoTrace(t *testing.T) {
	dir := t.TempDir()
	file, plot := filepath.Join(dir, "demo.trace"), filepath.Join(dir, "demo.svg")
	if r := runCLI(t, "", "demo", "--size-mib", "4", "--loss", "0.01", "--trace", file); r.code != 0 {
		t.Fatalf("demo: exit %d: %s", r.code, r.stderr)
	}
	r := runCLI(t, "", "trace", file, "--plot", plot)
	if r.code != 0 || !strings.Contains(r.stdout, "events over") || !strings.Contains(r.stdout, "mean RTT") {
		t.Fatalf("trace: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(plot); err != nil || !strings.Contains(string(b), "<svg") {
		t.Fatalf("plot: %v", err)
	}
	evs := readTrace(t, file)
	if !slices.ContainsFunc(evs, func(e tracelog.Event) bool { return e.Kind == "lost" }) {
		t.Fatalf("no loss among %d events at 1%% loss", len(evs))
	}
	if r := runCLI(t, "", "trace", filepath.Join(dir, "none")); r.code != 2 {
		t.Fatalf("a missing trace: exit %d", r.code)
	}
}
