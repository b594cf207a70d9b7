package conformance

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/conformance/bugs"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/proto"
)

// responder opens an mroce endpoint on addr, with the bugs of bugSet, that
// listens and grants remote write and remote atomic access on a region; it returns the target the
// cases need. tweaks change the endpoint's configuration.
func responder(t *testing.T, addr string, bugSet bugs.Set, tweaks ...func(*engine.Config)) Target {
	t.Helper()
	var host *software.UDPHost
	var err error
	for try := 0; try < 20 && host == nil; try++ {
		base := uint16(20000 + rand.IntN(40000))
		cfg := engine.Config{Planes: []netip.Addr{netip.MustParseAddr(addr)}, Port: base, Paths: 8, Streams: 2,
			SourcePorts: []uint16{base + 1, base + 2}, NoProgress: 10 * time.Second}
		for _, tweak := range tweaks {
			tweak(&cfg)
		}
		host, err = software.OpenUDPEngine(cfg, bugSet.Wrapper)
	}
	if host == nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	dev := host.Device()
	pd, _ := dev.AllocPD()
	cq := dev.CreateCQ(64)
	lis, err := pd.Listen(cq, cq, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The cases' connections only WRITE into the region, but a listener
	// closes a connection that waits for Accept past its deadline. The
	// loop ends when the host closes.
	go func() {
		for {
			if _, err := lis.Accept(context.Background()); err != nil {
				return
			}
		}
	}()
	mr, err := pd.RegisterMR(make([]byte, 1<<20), endpoint.LocalWrite|endpoint.RemoteWrite|endpoint.RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	remote := host.Remote()
	return Target{Addr: netip.AddrPortFrom(remote.Planes[0], remote.Port), RKey: mr.RKey(), Len: 1 << 20, Streams: 2}
}

// mroce passes every packet-level case.
func TestMrocePassesEveryCase(t *testing.T) {
	env := Env{Target: responder(t, "127.0.0.51", bugs.Set{}), Local: netip.MustParseAddr("127.0.0.52")}
	for _, r := range Run(env, Cases) {
		if r.Result != "pass" {
			t.Errorf("%s (spec %s): %s", r.Case, r.Spec, r.Details)
		}
	}
}

// A responder that validates every CONNECT's address with a RETRY (spec
// section 8.1) passes every case too: the prober returns its token.
func TestMrocePassesEveryCaseThroughRetry(t *testing.T) {
	retryAlways := func(c *engine.Config) { c.RetryAt = engine.RetryAlways }
	env := Env{Target: responder(t, "127.0.0.75", bugs.Set{}, retryAlways), Local: netip.MustParseAddr("127.0.0.76")}
	for _, r := range Run(env, Cases) {
		if r.Result != "pass" {
			t.Errorf("%s (spec %s): %s", r.Case, r.Spec, r.Details)
		}
	}
}

// Deliberately broken builds fail the cases that should catch them, and
// only those, so the suite tells one bug from another.
func TestBrokenBuildsFailTheRightCases(t *testing.T) {
	cases := []struct {
		name  string
		broke bugs.Set
		red   []string
	}{
		{"ignores a SACK bit", bugs.Set{IgnoreSACKBit: true}, []string{"sack-exact", "duplicate", "psn-wrap"}},
		{"places corrupt packets", bugs.Set{AcceptBadCRC: true}, []string{"bad-crc"}},
		{"skips key checks", bugs.Set{SkipKeyCheck: true}, []string{"bad-key", "bad-key-again"}},
	}
	for i, c := range cases {
		target := responder(t, fmt.Sprintf("127.0.0.%d", 53+2*i), c.broke)
		env := Env{Target: target, Local: netip.MustParseAddr(fmt.Sprintf("127.0.0.%d", 54+2*i))}
		var red []string
		for _, r := range Run(env, Cases) {
			if r.Result != "pass" {
				red = append(red, r.Case)
			}
		}
		if fmt.Sprint(red) != fmt.Sprint(c.red) {
			t.Errorf("a responder that %s fails %v, want %v", c.name, red, c.red)
		}
	}
}

// docs/conformance.md lists every case with its spec sections and pass
// criteria, as the code has them.
func TestDocsListEveryCase(t *testing.T) {
	doc, err := os.ReadFile("../docs/conformance.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Cases {
		row := fmt.Sprintf("| `%s` | %s | %s |", c.Name, c.Spec, c.What)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/conformance.md lacks the row %s", row)
		}
	}
	for _, c := range AuthCases {
		row := fmt.Sprintf("| `%s` | %s | %s |", c.Name, c.Spec, c.What)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/conformance.md lacks the row %s", row)
		}
	}
	for _, c := range SenderCases {
		row := fmt.Sprintf("| `%s` | %s | %s |", c.Name, c.Spec, c.What)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/conformance.md lacks the row %s", row)
		}
	}
	for _, c := range RunnerCases {
		row := fmt.Sprintf("| `%s` | %d | %d MiB | %s |", c.Name, c.Planes, c.Size>>20, c.What)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/conformance.md lacks the row %s", row)
		}
	}
}

// Record finds an ACK's record for a path. A packet that is not an ACK
// has none, even a CLOSE whose header is shorter than a record. The
// probe's predicates see every packet a responder sends, whatever its
// type.
func TestRecordOnlyReadsACKs(t *testing.T) {
	buf := make([]byte, proto.MaxPacketLen)
	var ack proto.Packet
	if err := proto.Build(&ack, buf, proto.TypeAck, 2, 0); err != nil {
		t.Fatal(err)
	}
	ack.AckRecord(0).SetPathID(3)
	ack.AckRecord(1).SetPathID(5)
	ack.AckRecord(1).SetHighestPSN(77)
	if r, ok := Record(&ack, 5); !ok || r.HighestPSN() != 77 {
		t.Fatalf("path 5's record: ok %v", ok)
	}
	if _, ok := Record(&ack, 4); ok {
		t.Fatal("a record for path 4, which the ACK does not carry")
	}
	var cls proto.Packet
	if err := proto.Build(&cls, make([]byte, proto.MaxPacketLen), proto.TypeClose, 0, 0); err != nil {
		t.Fatal(err)
	}
	cls.Close().SetDetail(0xffffffff) // bytes an ACK would read as a record count
	if _, ok := Record(&cls, 0); ok {
		t.Fatal("a CLOSE read as an ACK record")
	}
}

// The loss judge counts a copy of a probe or a resend on another plane as
// no repair, but no more copies than the other retransmissions: a report
// cannot hide resends by calling them copies.
func TestLossJudgeSetsCopiesAside(t *testing.T) {
	judge := lossJudge(100)
	obs := func(retx, probes, copies uint64) Observed {
		r := EndpointReport{Bytes: 100, SHA256: "x", Packets: 2000, Retransmits: retx, TailProbes: probes, Copies: copies}
		return Observed{Requester: r, Responder: r, Dropped: 20}
	}
	if err := judge(obs(44, 2, 20)); err != nil { // 22 resends and their 20 copies
		t.Errorf("22 resends, 2 probes and 20 copies for 20 lost: %v", err)
	}
	if err := judge(obs(44, 2, 0)); err == nil {
		t.Error("42 resends for 20 lost passed")
	}
	if err := judge(obs(80, 0, 80)); err == nil {
		t.Error("80 retransmissions all called copies passed")
	}
}

// A responder that grants no RECUT leaves recut-covered unsupported, not
// failed, and passes every other case.
func TestRecutCaseWithoutRecutIsUnsupported(t *testing.T) {
	noRecut := func(c *engine.Config) { c.NoRecut = true }
	env := Env{Target: responder(t, "127.0.0.77", bugs.Set{}, noRecut), Local: netip.MustParseAddr("127.0.0.78")}
	for _, r := range Run(env, Cases) {
		want := "pass"
		if r.Case == "recut-covered" {
			want = "unsupported"
		}
		if r.Result != want {
			t.Errorf("%s: %s (%s), want %s", r.Case, r.Result, r.Details, want)
		}
	}
}

// mroce in the authenticated mode passes every packet-level case with the
// prober in the mode too, the auth- cases among them. Without its
// credentials those cases are unsupported, and against a responder that is
// not in the mode the prober's handshake fails.
func TestMrocePassesEveryCaseAuthenticated(t *testing.T) {
	cred := &auth.Credentials{Method: auth.MethodPSK, PSK: bytes.Repeat([]byte{0x33}, auth.PSKLen)}
	withAuth := func(c *engine.Config) { c.Auth = cred }
	target := responder(t, "127.0.0.77", bugs.Set{}, withAuth)
	target.Auth = cred
	env := Env{Target: target, Local: netip.MustParseAddr("127.0.0.78")}
	for _, r := range Run(env, append(slices.Clone(Cases), AuthCases...)) {
		if r.Result != "pass" {
			t.Errorf("%s (spec %s): %s", r.Case, r.Spec, r.Details)
		}
	}
	plain := Env{Target: responder(t, "127.0.0.79", bugs.Set{}), Local: netip.MustParseAddr("127.0.0.80")}
	for _, r := range Run(plain, AuthCases) {
		if r.Result != "unsupported" {
			t.Errorf("%s without credentials: %s (%s)", r.Case, r.Result, r.Details)
		}
	}
	plain.Target.Auth = cred
	if r := Run(plain, AuthCases[:1])[0]; r.Result != "fail" {
		t.Errorf("auth-handshake against a responder without the mode: %s (%s)", r.Result, r.Details)
	}
}
