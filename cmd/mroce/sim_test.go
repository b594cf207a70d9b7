package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mroce/mroce/tracelog"
)

// Each scenario runs from the command line at a reduced size. It prints
// its table as JSON with the expected columns and rows, writes its plot,
// and gives the same results for the same seed.
func TestSimScenarios(t *testing.T) {
	cases := []struct {
		args    []string
		columns []string
		rows    int
	}{
		{[]string{"sim", "loss", "--losses", "0,0.01", "--size-mib", "4"}, []string{"loss", "mroce/0%", "baseline/0%", "model 1/(1+pW)"}, 2},
		{[]string{"sim", "loss", "--losses", "0,0.02", "--size-mib", "2", "--burst"}, []string{"loss", "mroce/0%"}, 2},
		{[]string{"sim", "loss", "--losses", "0,0.05", "--size-mib", "2", "--burst", "--burst-time", "1.5us"}, []string{"loss", "mroce/0%"}, 2},
		{[]string{"sim", "incast", "--senders", "4", "--rates-gbps", "100", "--size-kib", "256"}, []string{"N", "variant", "converged (base RTTs)", "slowest FCT/ideal"}, 4},
		{[]string{"sim", "planes", "--planes", "1,2", "--hosts", "4", "--size-kib", "64"}, []string{"planes", "connections", "vs half the planes", "connections lost"}, 2},
		{[]string{"sim", "planefail", "--planes", "2", "--hosts", "3", "--all-to-all", "--size-mib", "8", "--fail-at", "10us", "--repair-at", "600us"}, []string{"period", "target"}, 4},
		{[]string{"sim", "allreduce", "--hosts", "4", "--sizes-mib", "1", "--losses", "0,0.01"}, []string{"algbw Gb/s", "busbw Gb/s", "FCT p99 µs", "mode"}, 4},
		{[]string{"sim", "alltoall", "--hosts", "4", "--sizes-mib", "1", "--losses", "0", "--no-baseline"}, []string{"busbw / host capacity"}, 1},
		{[]string{"sim", "permutation", "--hosts", "8", "--hosts-per-leaf", "4", "--shift", "4", "--size-mib", "1", "--paths", "8,16"}, []string{"mode", "slowest / fastest"}, 3},
	}
	for _, c := range cases {
		plot := filepath.Join(t.TempDir(), "p.svg")
		args := append(append([]string{}, c.args...), "--json", "--plot", plot)
		fabric := c.args[1] != "loss" && c.args[1] != "incast" // the scenarios with --workers
		if fabric {
			args = append(args, "--workers", "1")
		}
		first := runCLI(t, "", args...)
		if first.code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, first.code, first.stderr)
		}
		var doc struct {
			Scenario string
			Tables   []struct {
				Columns []string
				Rows    [][]any
			}
		}
		if err := json.Unmarshal([]byte(first.stdout), &doc); err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, first.stdout)
		}
		if len(doc.Tables) < 1 || len(doc.Tables[0].Rows) != c.rows {
			t.Fatalf("%v: %+v", c.args, doc)
		}
		cols := strings.Join(doc.Tables[0].Columns, "|")
		for _, want := range c.columns {
			if !strings.Contains(cols, want) {
				t.Errorf("%v: no column %q in %s", c.args, want, cols)
			}
		}
		if b, err := os.ReadFile(plot); err != nil || !strings.Contains(string(b), "<svg") {
			t.Errorf("%v: plot %v", c.args, err)
		}
		// The same seed gives the same first table, however many runs go
		// at once and however many cores a run takes. A second table, if
		// any, is the simulator's wall-clock speed.
		if takesJobs(c.args[1]) {
			args = append(args, "--jobs", "3")
		}
		if fabric {
			args = append(args, "--workers", "3")
		}
		again := runCLI(t, "", args...)
		var doc2 struct{ Tables []json.RawMessage }
		var doc1 struct{ Tables []json.RawMessage }
		json.Unmarshal([]byte(again.stdout), &doc2)
		json.Unmarshal([]byte(first.stdout), &doc1)
		if len(doc2.Tables) == 0 || string(doc2.Tables[0]) != string(doc1.Tables[0]) {
			t.Errorf("%v: a second run with the same seed differs", c.args)
		}
	}
}

// A traffic file runs and prints a summary and a row per flow.
func TestSimFlowsFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t.txt")
	os.WriteFile(file, []byte("hosts 3\nplanes 2\n0->1 start 0 size 256KiB\n1->2 start 0 size 64KiB after 0\n"), 0o644)
	r := runCLI(t, "", "sim", "flows", "--plot", "", file)
	if r.code != 0 || !strings.Contains(r.stdout, "2 flows on 3 hosts") || !strings.Contains(r.stdout, "Every flow") {
		t.Fatalf("exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	os.WriteFile(file, []byte("hosts 3\n0->7 size 1\n"), 0o644)
	if r := runCLI(t, "", "sim", "flows", file); r.code != 2 || !strings.Contains(r.stderr, "0->7, but there are 3 hosts") {
		t.Fatalf("a bad file: exit %d, %s", r.code, r.stderr)
	}
}

// --seeds runs a scenario with each seed from --seed up and folds its
// tables: the title names the seeds, and a figure the seeds moved shows
// its spread. With the starts spread by the seed the incast's
// convergence moves.
func TestSimSeeds(t *testing.T) {
	r := runCLI(t, "", "sim", "incast", "--senders", "8", "--rates-gbps", "100", "--size-kib", "512", "--start-jitter", "2us",
		"--seed", "4", "--seeds", "3", "--plot", "")
	if r.code != 0 || !strings.Contains(r.stdout, "seeds 4 to 6: min-max (median)") || !regexp.MustCompile(`\d-\d+\.\d+ \(`).MatchString(r.stdout) {
		t.Fatalf("exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "sim", "incast", "--seeds", "0"); r.code != 2 || !strings.Contains(r.stderr, "--seeds must be 1 to 100") {
		t.Fatalf("--seeds 0: exit %d, %s", r.code, r.stderr)
	}
}

// The link flags reach the fabric and the engines, and the table says
// what they were. A quarter of the MTU takes four times the packets.
func TestSimLinkFlags(t *testing.T) {
	packets := func(args ...string) (uint64, []string) {
		t.Helper()
		r := runCLI(t, "", append([]string{"sim", "planes", "--planes", "1", "--hosts", "3", "--size-kib", "256", "--json", "--plot", ""}, args...)...)
		var doc struct {
			Tables []struct {
				Rows  [][]float64
				Notes []string
			}
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &doc) != nil || len(doc.Tables) != 2 {
			t.Fatalf("%v: exit %d: %s %s", args, r.code, r.stdout, r.stderr)
		}
		// The speed is made of a data packet's events, which are its
		// pacing and the links it and its share of an ACK cross, and of
		// datagrams.
		if row := doc.Tables[1].Rows[0]; row[5] < 4 || row[6] <= 1 {
			t.Errorf("%v: %.2f events and %.2f datagrams a data packet", args, row[5], row[6])
		}
		return uint64(doc.Tables[1].Rows[0][1]), doc.Tables[0].Notes
	}
	base, notes := packets()
	if strings.Contains(strings.Join(notes, " "), "Links:") {
		t.Errorf("default links noted: %q", notes)
	}
	small, notes := packets("--mtu", "1024", "--delay", "3us", "--ecn-kib", "100", "--buffer-kib", "4096")
	if small < 4*base-8 || small > 4*base+8 {
		t.Errorf("%d data packets at MTU 1024, %d at 4096: want four times", small, base)
	}
	want := "Links: 3µs of delay, DCTCP marking at 100 KiB, 4096 KiB buffers, 1 KiB packets"
	if !strings.Contains(strings.Join(notes, " "), want) {
		t.Errorf("notes %q, want %q", notes, want)
	}
	r := runCLI(t, "", "sim", "incast", "--senders", "2", "--rates-gbps", "100", "--size-kib", "64", "--mtu", "2048", "--plot", "")
	if r.code != 0 || !strings.Contains(r.stdout, "2 KiB packets") {
		t.Fatalf("incast --mtu 2048: exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	// sim planes may name any plane of its largest count.
	r = runCLI(t, "", "sim", "planes", "--planes", "2,4", "--plane-rate-gbps", "3=50", "--hosts", "3", "--size-kib", "64", "--plot", "")
	if r.code != 0 {
		t.Fatalf("planes --plane-rate-gbps 3=50 with --planes 2,4: exit %d: %s", r.code, r.stderr)
	}
}

// Text and CSV, and bad flags.
func TestSimOutputsAndErrors(t *testing.T) {
	r := runCLI(t, "", "sim", "loss", "--losses", "0", "--size-mib", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "mroce Gb/s") || strings.Contains(r.stdout, "plot:") {
		t.Fatalf("text: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat("sim-loss.svg"); err == nil {
		t.Fatal("sim loss wrote a plot it was not asked for")
	}
	r = runCLI(t, "", "sim", "loss", "--losses", "0", "--size-mib", "1", "--plot", "", "--csv")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "loss,mroce Gb/s,") {
		t.Fatalf("CSV: %q", r.stdout)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"sim", "loss", "--losses", "0.7"}, "0.7 is not 0 to 0.5"},
		{[]string{"sim", "loss", "--json", "--csv"}, "--json or --csv, not both"},
		{[]string{"sim", "incast", "--senders", "100"}, "100 is not 1 to 64"},
		{[]string{"sim", "planes", "--planes", "9"}, "9 is not 1 to 8"},
		{[]string{"sim", "planefail", "--plane", "8"}, "--plane one of them"},
		{[]string{"sim", "planefail", "--repair-at", "300us"}, "falls in the window the failure is measured over"},
		{[]string{"sim", "allreduce", "--sizes-mib", "2048"}, "2048 is not 1 to 1024"},
		{[]string{"sim", "permutation", "--hosts", "8", "--shift", "16"}, "--shift not a multiple of --hosts"},
		{[]string{"sim", "planes", "--paths", "0"}, "--paths must be 1 to 256"},
		{[]string{"sim", "alltoall", "--mtu", "100"}, "mtu 100: want 256 to 8192"},
		{[]string{"sim", "loss", "--delay", "-1us"}, "delay -1µs: want 0 to 10ms"},
		{[]string{"sim", "planes", "--buffer-kib", "1"}, "buffer of 1024 bytes: want at least one full packet"},
		{[]string{"sim", "planes", "--ecn-kib", "18014398509481984"}, "--ecn-kib must be 0 to 1048576"},
		{[]string{"sim", "loss", "--burst-time", "2us"}, "--burst-time must be 100ns to 1s, and comes with --burst"},
		{[]string{"sim", "loss", "--burst", "--burst-time", "2us", "--burst-len", "8"}, "and without --burst-len"},
		{[]string{"sim", "loss", "--burst", "--burst-time", "1ns"}, "--burst-time must be 100ns to 1s"},
		{[]string{"sim", "planes", "--mtu", "4000", "--buffer-kib", "3"}, "buffer of 3072 bytes: want at least one full packet, 4064 bytes"},
		{[]string{"sim", "incast", "--buffer-kib", "0"}, "--buffer-kib 1 to 1048576"},
		{[]string{"sim", "planes", "--shared-buffer-kib", "2"}, "shared buffer of 2048 bytes: want 0 (none) or at least one full packet"},
		{[]string{"sim", "planes", "--shared-buffer-kib", "1024", "--shared-buffer-alpha", "0"}, "--shared-buffer-alpha above 0"},
		{[]string{"sim", "planes", "--shared-buffer-alpha", "2"}, "--shared-buffer-alpha comes with --shared-buffer-kib"},
		{[]string{"sim", "permutation", "--planes", "2", "--plane-buffer-kib", "1=2"}, "plane 1 buffer of 2048 bytes: want at least one full packet"},
		{[]string{"sim", "permutation", "--planes", "2", "--plane-buffer-kib", "3=64"}, "plane 3: there are 2 planes"},
		{[]string{"sim", "planes", "--start-jitter", "1s"}, "--start-jitter must be 0 to 10ms"},
		{[]string{"sim", "permutation", "--first-window", "64"}, "--first-window must be bdp or fixed"},
		{[]string{"sim", "flows", "--seeds", "0", "x.txt"}, "--seeds must be 1 to 100"},
		{[]string{"sim", "alltoall", "--jobs", "-1"}, "--jobs must not be negative"},
		{[]string{"sim", "planes", "--workers", "-1"}, "--workers must not be negative"},
		{[]string{"sim", "planes", "--jobs", "2", "--memprofile", "x"}, "--memprofile wants --jobs 1"},
		{[]string{"sim", "loss", "--ack-timeout", "500ns"}, "--ack-timeout must be 0 (adaptive) or 1µs to 1s"},
		{[]string{"sim", "loss", "--losses", "0", "--size-mib", "1", "--plot", "x.gif"}, "want a .svg or .png file"},
	} {
		r := runCLI(t, "", c.args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, %q; want %q", c.args, r.code, r.stderr, c.msg)
		}
	}
}

// --first-window reaches the engines of a fabric scenario, and its table
// says where it is fixed: in a permutation on a leaf-spine at 400 Gb/s,
// where each host opens one connection and a bandwidth-delay product is
// several times 16 packets, the flows end sooner with the default first
// window of one BDP than with a fixed one of 16 packets.
func TestSimFirstWindowFlag(t *testing.T) {
	const note = "First windows of 16 packets"
	run := func(window string) (p50 float64, noted bool) {
		r := runCLI(t, "", "sim", "permutation", "--hosts", "8", "--hosts-per-leaf", "4", "--spines", "4", "--planes", "1",
			"--rate-gbps", "400", "--size-mib", "1", "--paths", "8", "--shift", "4", "--first-window", window, "--plot", "")
		lines := strings.Split(r.stdout, "\n")
		if r.code != 0 || len(lines) < 3 {
			t.Fatalf("--first-window %s: exit %d: %s%s", window, r.code, r.stdout, r.stderr)
		}
		row := strings.Fields(lines[2]) // mode, paths, Gb/s, of capacity, FCT p50, ...
		if len(row) < 5 || row[0] != "mroce" {
			t.Fatalf("--first-window %s: no mroce row: %s", window, r.stdout)
		}
		p50, err := strconv.ParseFloat(row[4], 64)
		if err != nil {
			t.Fatalf("--first-window %s: FCT p50 %q: %v", window, row[4], err)
		}
		return p50, strings.Contains(r.stdout, note)
	}
	bdp, bdpNoted := run("bdp")
	fixed, fixedNoted := run("fixed")
	if bdpNoted || !fixedNoted {
		t.Errorf("the note of a fixed first window: in its run's table %v, in one BDP's %v", fixedNoted, bdpNoted)
	}
	if bdp >= fixed {
		t.Errorf("FCT p50 %v µs with first windows of one BDP, %v µs with 16 packets: want it sooner", bdp, fixed)
	}
}

// --cpuprofile writes a CPU profile of the run, --memprofile a heap profile
// of a run of flows, each in the gzipped protobuf runtime/pprof writes.
func TestSimProfiles(t *testing.T) {
	for _, args := range [][]string{
		{"sim", "incast", "--senders", "8", "--rates-gbps", "100", "--plot", "", "--cpuprofile"},
		{"sim", "planes", "--planes", "1", "--hosts", "4", "--plot", "", "--memprofile"},
	} {
		path := filepath.Join(t.TempDir(), "prof")
		r := runCLI(t, "", append(args, path)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		b, err := os.ReadFile(path)
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Fatalf("%v: profile %v: %d bytes", args, err, len(b))
		}
	}
}

// sim --trace writes the first run's decisions, which mroce trace reads:
// for the loss scenario, the mroce transfer at the first rate, with its
// losses and resends, and nothing of the five other runs, which a run of
// that rate alone shows: its trace is the same to the byte.
func TestSimTrace(t *testing.T) {
	dir := t.TempDir()
	file, alone := filepath.Join(dir, "loss.trace"), filepath.Join(dir, "alone.trace")
	r := runCLI(t, "", "sim", "loss", "--losses", "0.02,0.05", "--size-mib", "2", "--jobs", "2", "--trace", file)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "sim", "loss", "--losses", "0.02", "--size-mib", "2", "--trace", alone); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if a, b := readFile(t, file), readFile(t, alone); !bytes.Equal(a, b) {
		t.Fatalf("the scenario's trace (%d bytes) is not its first run's alone (%d bytes)", len(a), len(b))
	}
	evs := readTrace(t, file)
	var lost, resent int
	conns := map[uint32]bool{}
	for _, e := range evs {
		conns[e.Conn] = true
		lost += map[bool]int{true: 1}[e.Kind == "lost"]
		resent += map[bool]int{true: 1}[e.Kind == "sent" && e.Retransmit]
	}
	if lost == 0 || resent == 0 || len(conns) > 2 {
		t.Fatalf("%d events of %d connections, %d lost, %d resent: want one run's, with losses and resends", len(evs), len(conns), lost, resent)
	}
	r = runCLI(t, "", "trace", file, "--plot", filepath.Join(dir, "loss.svg"))
	if r.code != 0 || !strings.Contains(r.stdout, "plot: ") {
		t.Fatalf("mroce trace: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "sim", "loss", "--losses", "0", "--size-mib", "1", "--trace", filepath.Join(dir, "none", "x")); r.code != 2 || !strings.Contains(r.stderr, "--trace") {
		t.Fatalf("a trace file that cannot be made: exit %d, %s", r.code, r.stderr)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readTrace reads the events of a --trace file.
func readTrace(t *testing.T, path string) []tracelog.Event {
	t.Helper()
	evs, err := tracelog.Read(bytes.NewReader(readFile(t, path)))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
