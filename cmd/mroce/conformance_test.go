package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
)

// conformance self passes every case; its JSON lists them; the HTML page
// is written.
func TestConformanceSelf(t *testing.T) {
	page := filepath.Join(t.TempDir(), "c.html")
	r := runCLI(t, "", "conformance", "self", "--json", "--html", page)
	if r.code != 0 {
		t.Fatalf("exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	var rep struct {
		Results []struct{ Case, Result string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Results) < 13 {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	for _, x := range rep.Results {
		if x.Result != "pass" {
			t.Errorf("%s: %s", x.Case, x.Result)
		}
	}
	if b, err := os.ReadFile(page); err != nil || !strings.Contains(string(b), `class="pass"`) {
		t.Fatalf("page: %v", err)
	}
}

// conformance probe of a responder that skips its key checks: exit 1, and
// the bad-key case marked FAIL.
func TestConformanceProbeFindsABrokenResponder(t *testing.T) {
	var host *endpoint.UDPHost
	var base uint16
	for try := 0; try < 20 && host == nil; try++ {
		base = uint16(20000 + rand.IntN(40000))
		host, _ = endpoint.OpenUDP(engine.Config{Planes: []netip.Addr{netip.MustParseAddr("127.0.0.57")}, Port: base, Paths: 8,
			Streams: 2, SourcePorts: []uint16{base + 1}, NoProgress: 10 * time.Second, Broken: engine.Breakage{SkipKeyCheck: true}})
	}
	if host == nil {
		t.Fatal("no free port")
	}
	defer host.Close()
	pd, _ := host.Device().AllocPD()
	cq := host.Device().CreateCQ(16)
	pd.Listen(cq, cq, endpoint.QPOptions{})
	mr, _ := pd.RegisterMR(make([]byte, 1<<20), endpoint.LocalWrite|endpoint.RemoteWrite)
	r := runCLI(t, "", "conformance", "probe", "--target", fmt.Sprintf("127.0.0.57:%d", base), "--rkey", fmt.Sprint(mr.RKey()),
		"--len", fmt.Sprint(1<<20), "--local", "127.0.0.58", "--name", "broken")
	if r.code != 1 || !strings.Contains(r.stdout, "bad-key        FAIL") || !strings.Contains(r.stdout, "12 of 13 passed") {
		t.Fatalf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, "", "conformance", "probe", "--target", "nonsense", "--rkey", "1", "--len", "4096"); r.code != 2 {
		t.Fatalf("a bad target: exit %d", r.code)
	}
}
