package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/app/contract"
	"github.com/mroce/mroce/conformance"
	"github.com/mroce/mroce/conformance/bugs"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/tracelog"
	"github.com/mroce/mroce/tunnet"
)

// conformance self passes every case, its JSON lists them, and the HTML
// page is written. Without --auth the cases of the authenticated mode are
// unsupported; with it, every case passes in the mode.
func TestConformanceSelf(t *testing.T) {
	for _, authed := range []bool{false, true} {
		page := filepath.Join(t.TempDir(), "c.html")
		args := []string{"conformance", "self", "--json", "--html", page}
		if authed {
			args = append(args, "--auth")
		}
		r := runCLI(t, "", args...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s %s", r.code, r.stdout, r.stderr)
		}
		var rep struct {
			Results []struct{ Case, Result string }
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Results) != len(conformance.Cases)+len(conformance.AuthCases) {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		for _, x := range rep.Results {
			want := "pass"
			if !authed && strings.HasPrefix(x.Case, "auth-") {
				want = "unsupported"
			}
			if x.Result != want {
				t.Errorf("--auth %v: %s: %s", authed, x.Case, x.Result)
			}
		}
		if b, err := os.ReadFile(page); err != nil || !strings.Contains(string(b), `class="pass"`) {
			t.Fatalf("page: %v", err)
		}
	}
}

// conformance probe of a responder that skips its key checks exits 1 and
// marks the bad-key case FAIL.
func TestConformanceProbeFindsABrokenResponder(t *testing.T) {
	var host *software.UDPHost
	var base uint16
	for try := 0; try < 20 && host == nil; try++ {
		base = uint16(20000 + rand.IntN(40000))
		host, _ = software.OpenUDPEngine(engine.Config{Planes: []netip.Addr{netip.MustParseAddr("127.0.0.57")}, Port: base, Paths: 8,
			Streams: 2, SourcePorts: []uint16{base + 1}, NoProgress: 10 * time.Second}, bugs.Set{SkipKeyCheck: true}.Wrapper)
	}
	if host == nil {
		t.Fatal("no free port")
	}
	defer host.Close()
	pd, _ := host.Device().AllocPD()
	cq := host.Device().CreateCQ(16)
	lis, _ := pd.Listen(cq, cq, endpoint.QPOptions{})
	go func() { // the cases only WRITE, but what is not accepted is closed at its deadline
		for {
			if _, err := lis.Accept(context.Background()); err != nil {
				return
			}
		}
	}()
	mr, _ := pd.RegisterMR(make([]byte, 1<<20), endpoint.LocalWrite|endpoint.RemoteWrite|endpoint.RemoteAtomic)
	r := runCLI(t, "", "conformance", "probe", "--target", fmt.Sprintf("127.0.0.57:%d", base), "--rkey", fmt.Sprint(mr.RKey()),
		"--len", fmt.Sprint(1<<20), "--local", "127.0.0.58", "--name", "broken")
	all := len(conformance.Cases) + len(conformance.AuthCases)
	if r.code != 1 || !strings.Contains(r.stdout, "bad-key             FAIL") || !strings.Contains(r.stdout, fmt.Sprintf("%d of %d passed", len(conformance.Cases)-2, all)) {
		t.Fatalf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "conformance", "probe", "--target", "nonsense", "--rkey", "1", "--len", "4096"); r.code != 2 {
		t.Fatalf("a bad target: exit %d", r.code)
	}
}

// runnerResult is one case of mroce conformance run --json.
type runnerResult struct{ Requester, Responder, Case, Result, Details, Logs, Pcap, Scenario string }

// conformanceJSON runs bin conformance ARGS, which include --json, with
// env added to this process's environment. It returns the results and the
// exit status.
func conformanceJSON(t *testing.T, bin string, env []string, args ...string) ([]runnerResult, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"conformance"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.Output() // exit 1 when a case failed
	var rep struct{ Results []runnerResult }
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v %v: %v:\n%s", env, args, err, out)
	}
	return rep.Results, cmd.ProcessState.ExitCode()
}

// runMatrix runs mroce conformance run with args, --logs and --json, and
// returns every case's result. The cases judge timing in real time on a
// machine that also runs this test, so a case that fails runs once more.
// Its logs go under logs/again beside the first run's, its first result is
// logged, and the second one stands. An implementation that is wrong fails
// both, as the broken builds fail every time they run. A scheduling stall
// longer than the real-socket timers of docs/udp.md seldom comes twice in a
// row.
func runMatrix(t *testing.T, bin, logs string, args ...string) []runnerResult {
	t.Helper()
	run := func(dir string, extra ...string) []runnerResult {
		results, _ := conformanceJSON(t, bin, nil, append(append([]string{"run", "--logs", dir, "--json"}, args...), extra...)...)
		return results
	}
	results := run(logs)
	var failed []string
	for _, r := range results {
		if r.Result == "fail" {
			failed = append(failed, r.Case)
			t.Logf("%s failed once, run again: %s", r.Case, r.Details)
		}
	}
	if len(failed) == 0 {
		return results
	}
	again := map[string]runnerResult{}
	for _, r := range run(filepath.Join(logs, "again"), "--cases", strings.Join(failed, ",")) { // the first failure's logs stay
		again[r.Case] = r
	}
	for i, r := range results {
		if a, ok := again[r.Case]; ok {
			results[i] = a
		}
	}
	return results
}

// Every one of the runner's two-endpoint cases passes with mroce against
// itself through the relay emulator, the built binary in separate
// processes.
func TestLargeConformanceRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary: with the large tests")
	}
	bin := buildBinary(t)
	logs := t.TempDir()
	results := runMatrix(t, bin, logs)
	if len(results) != len(conformance.RunnerCases) {
		t.Fatalf("%d results for %d cases", len(results), len(conformance.RunnerCases))
	}
	for _, r := range results {
		if r.Result != "pass" {
			t.Errorf("%s: %s %s", r.Case, r.Result, r.Details)
		}
		if st, err := os.Stat(r.Pcap); err != nil || st.Size() < 10000 || r.Logs != filepath.Join(logs, r.Case) && r.Logs != filepath.Join(logs, "again", r.Case) {
			t.Errorf("%s: capture %q (%v), logs %q", r.Case, r.Pcap, err, r.Logs)
		}
	}
	for _, f := range []string{"transfer/responder", "incast-32/requester", "incast-32/requester-32"} {
		if _, err := os.Stat(filepath.Join(logs, f, "report.json")); err != nil {
			t.Errorf("no report: %v", err)
		}
	}
	// A case the endpoint does not know exits 127 and is reported as
	// unsupported.
	cmd := exec.Command(bin, "conformance", "endpoint")
	cmd.Env = append(os.Environ(), "ROLE=requester", "TESTCASE=teleport")
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 127 {
		t.Fatalf("an unknown case: %v", err)
	}
}

// With MROCE_TRACE=1 each mroce endpoint writes its engine's decisions
// beside its report, and the requester's trace holds every byte it sent.
func TestLargeConformanceEndpointTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary: with the large tests")
	}
	bin := buildBinary(t)
	logs := t.TempDir()
	results, _ := conformanceJSON(t, bin, []string{"MROCE_TRACE=1"}, "run", "--logs", logs, "--json", "--cases", "transfer")
	if len(results) != 1 || results[0].Result != "pass" {
		t.Fatalf("%+v", results)
	}
	f, err := os.Open(filepath.Join(logs, "transfer", "requester", contract.TraceFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := tracelog.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	var sent int64
	for _, ev := range evs {
		if ev.Kind == "sent" && !ev.Retransmit {
			sent += int64(ev.Bytes)
		}
	}
	i := slices.IndexFunc(conformance.RunnerCases, func(c conformance.RunnerCase) bool { return c.Name == "transfer" })
	if size := int64(conformance.RunnerCases[i].Size); sent < size {
		t.Errorf("%d events, their first transmissions %d bytes of %d", len(evs), sent, size)
	}
	if _, err := os.Stat(filepath.Join(logs, "transfer", "responder", contract.TraceFile)); err != nil {
		t.Error(err)
	}
}

// Endpoints with a deliberate bug turn exactly the right runner cells red.
func TestLargeRunnerCatchesBrokenBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary: with the large tests")
	}
	bin := buildBinary(t)
	for _, c := range []struct {
		bug, cases string
		fail       map[string]bool
	}{
		{"responder:ignore-sack-bit", "write,read,corruption", map[string]bool{"write": true}},
		{"responder:accept-bad-crc", "write,read,corruption", map[string]bool{"corruption": true}},
		// Every case checks the PSNs on the wire. READ's requester sends
		// too few packets, 16 requests, for the bug to show.
		{"requester:reuse-psn", "write,read,corruption", map[string]bool{"write": true, "corruption": true}},
		{"requester:ignore-ce", "ecn,write", map[string]bool{"ecn": true}},
		{"responder:miscount-ce", "ecn,write", map[string]bool{"ecn": true}},
	} {
		results, _ := conformanceJSON(t, bin, []string{"MROCE_BREAK=" + c.bug}, "run", "--logs", t.TempDir(), "--json", "--cases", c.cases)
		if len(results) != strings.Count(c.cases, ",")+1 {
			t.Fatalf("%s: %d results for %s", c.bug, len(results), c.cases)
		}
		for _, r := range results {
			if want := map[bool]string{true: "fail", false: "pass"}[c.fail[r.Case]]; r.Result != want {
				t.Errorf("%s: %s %s (%s), want %s", c.bug, r.Case, r.Result, r.Details, want)
			}
		}
	}
}

// The interop matrix runs every ordered pair of this mroce, one built to
// place corrupt packets as a responder, and one that exits 127 for every
// case. Each cell shows the implementation in the failing role. The
// corruption case fails exactly where the broken one responds, and every
// pair with the other is unsupported, not failed.
func TestLargeConformanceInteropMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary: with the large tests")
	}
	bin := buildBinary(t)
	none := filepath.Join(t.TempDir(), "none.sh")
	if err := os.WriteFile(none, []byte("#!/bin/sh\nexit 127\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	page := filepath.Join(logs, "index.html")
	results, code := conformanceJSON(t, bin, nil, "run", "--logs", logs, "--json", "--html", page, "--cases", "corruption",
		"--impl", "broken=env MROCE_BREAK=responder:accept-bad-crc "+bin+" conformance endpoint", "--impl", "none="+none)
	if code != 1 || len(results) != 9 {
		t.Fatalf("exit %d (want 1: a case failed), %d results: %+v", code, len(results), results)
	}
	want := func(req, resp string) string {
		switch {
		case req == "none" || resp == "none":
			return "unsupported"
		case resp == "broken":
			return "fail"
		}
		return "pass"
	}
	for _, r := range results {
		if w := want(r.Requester, r.Responder); r.Result != w {
			t.Errorf("%s -> %s: %s %s, want %s", r.Requester, r.Responder, r.Result, r.Details, w)
		}
		if r.Logs != filepath.Join(logs, r.Requester, r.Responder, "corruption") {
			t.Errorf("%s -> %s: logs in %s", r.Requester, r.Responder, r.Logs)
		}
	}
	html, err := os.ReadFile(page)
	if err != nil || !strings.Contains(string(html), "Interop matrix") || strings.Count(string(html), `<td class="fail">0/1 fail: corruption`) != 2 {
		t.Errorf("the page (%v):\n%s", err, html)
	}
}

// Every runner case passes through the TUN emulator, each endpoint in its
// own network namespace on real kernel sockets, and nothing is left
// behind. It needs root and ip.
func TestLargeConformanceRunnerTUN(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary: with the large tests")
	}
	if _, err := exec.LookPath("ip"); os.Geteuid() != 0 || err != nil {
		if os.Getenv("MROCE_REQUIRE_NETADMIN") != "" {
			t.Fatal("needs root and ip (Debian package iproute2)")
		}
		t.Skip("needs root and ip (Debian package iproute2)")
	}
	bin := buildBinary(t)
	logs := t.TempDir()
	results := runMatrix(t, bin, logs, "--emulator", "tun")
	if len(results) != len(conformance.RunnerCases) {
		t.Fatalf("%d results for %d cases", len(results), len(conformance.RunnerCases))
	}
	for _, r := range results {
		if r.Result != "pass" || !strings.HasPrefix(r.Scenario, "tun emulator") {
			t.Errorf("%s: %s %s (%s)", r.Case, r.Result, r.Details, r.Scenario)
		}
		if st, err := os.Stat(r.Pcap); err != nil || st.Size() < 10000 {
			t.Errorf("%s: capture %q: %v", r.Case, r.Pcap, err)
		}
	}
	all, _ := tunnet.List("")
	for _, ns := range all {
		if strings.HasPrefix(ns, "mroce-conf") {
			t.Errorf("a namespace left behind: %s", ns)
		}
	}
}

// conformance sender refuses an unknown case and a bad probe address
// before starting anything.
func TestConformanceSenderBadFlags(t *testing.T) {
	if r := runCLI(t, "", "conformance", "sender", "--cases", "teleport"); r.code != 2 || !strings.Contains(r.stderr, `no case "teleport"`) {
		t.Errorf("an unknown case: exit %d, %q", r.code, r.stderr)
	}
	if r := runCLI(t, "", "conformance", "sender", "--probe", "nowhere"); r.code != 2 || !strings.Contains(r.stderr, "--probe") {
		t.Errorf("a bad probe address: exit %d, %q", r.code, r.stderr)
	}
}

// The requester cases against this mroce pass, and a requester built to
// ignore RNR's RetryAfter fails exactly sender-rnr, one built to ignore
// CE echoes exactly sender-ecn.
func TestLargeConformanceSender(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary: with the large tests")
	}
	bin := buildBinary(t)
	for _, c := range []struct{ bug, fails string }{
		{"", ""},
		{"requester:ignore-retry-after", "sender-rnr"},
		{"requester:ignore-ce", "sender-ecn"},
	} {
		run := func(cases ...string) []runnerResult {
			args := []string{"sender", "--logs", t.TempDir(), "--json"}
			if len(cases) > 0 {
				args = append(args, "--cases", strings.Join(cases, ","))
			}
			results, _ := conformanceJSON(t, bin, []string{"MROCE_BREAK=" + c.bug}, args...)
			return results
		}
		want := func(r runnerResult) string { return map[bool]string{true: "fail", false: "pass"}[r.Case == c.fails] }
		results := run()
		if len(results) != len(conformance.SenderCases) {
			t.Fatalf("%q: %d results for %d cases", c.bug, len(results), len(conformance.SenderCases))
		}
		for _, r := range results {
			if r.Result != want(r) && want(r) == "fail" {
				t.Errorf("%q: %s passed: the bug went unnoticed", c.bug, r.Case) // never given a second chance
			} else if r.Result != want(r) {
				// A case that should pass runs in real time, so it gets
				// a second run as in runMatrix.
				t.Logf("%q: %s %s (%s), want %s: run again", c.bug, r.Case, r.Result, r.Details, want(r))
				if again := run(r.Case); len(again) != 1 || again[0].Result != want(r) {
					t.Errorf("%q: %s %v, want %s", c.bug, r.Case, again, want(r))
				}
			}
		}
	}
}
