package contract

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mroce/mroce/conformance"
)

// env is a contract environment of a requester, with changes.
func env(changes map[string]string) func(string) string {
	vars := map[string]string{"ROLE": "requester", "TESTCASE": "transfer", "PLANES": "127.0.0.1,127.0.0.2",
		"PEER": "127.0.0.3,127.0.0.4", "PORT": "4797", "SIZE": "1024", "LOGDIR": "/tmp"}
	for k, v := range changes {
		vars[k] = v
	}
	return func(k string) string { return vars[k] }
}

// ParseEnv reads every variable of the contract, refuses what the
// contract does not allow, and reports an unknown case as unsupported
// before anything else.
func TestParseEnv(t *testing.T) {
	psk := filepath.Join(t.TempDir(), "psk")
	os.WriteFile(psk, []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
	cfg, err := ParseEnv(env(map[string]string{"REQUESTERS": "8", "START": "1000", "MROCE_BREAK": "requester:reuse-psn,responder:ignore-ce",
		"TIMEOUT": "2.5", "PSK_FILE": psk, "MROCE_TRACE": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Role != Requester || cfg.Case != "transfer" || len(cfg.Planes) != 2 || len(cfg.Peer) != 2 || cfg.Port != 4797 ||
		cfg.Size != 1024 || cfg.Requesters != 8 || !cfg.Start.Equal(time.Unix(0, 1000)) || !cfg.Broken.ReusePSN || cfg.Broken.IgnoreCE ||
		cfg.Timeout != 2500*time.Millisecond || len(cfg.PSK) != 32 || cfg.PSK[0] != 0xab || !cfg.Trace {
		t.Errorf("%+v", cfg)
	}
	if cfg, _ := ParseEnv(env(nil)); cfg.Timeout != DefaultTimeout || cfg.PSK != nil || cfg.Trace {
		t.Errorf("without TIMEOUT, PSK_FILE and MROCE_TRACE: %v, %x, %v", cfg.Timeout, cfg.PSK, cfg.Trace)
	}
	for _, c := range []struct {
		changes map[string]string
		msg     string
	}{
		{map[string]string{"TESTCASE": "nonesuch", "PORT": "bad"}, ErrUnsupported.Error()},
		{map[string]string{"PLANES": ""}, "PLANES"},
		{map[string]string{"PORT": "0"}, "PORT"},
		{map[string]string{"SIZE": "-1"}, "SIZE"},
		{map[string]string{"REQUESTERS": "1001"}, "REQUESTERS"},
		{map[string]string{"START": "soon"}, "START"},
		{map[string]string{"PEER": "127.0.0.3"}, "PEER"},
		{map[string]string{"ROLE": "observer"}, "ROLE"},
		{map[string]string{"MROCE_BREAK": "requester:nonesuch"}, "MROCE_BREAK"},
		{map[string]string{"TIMEOUT": "0"}, "TIMEOUT"},
		{map[string]string{"TIMEOUT": "soon"}, "TIMEOUT"},
		{map[string]string{"PSK_FILE": "/nonexistent/psk"}, "PSK_FILE"},
		{map[string]string{"MROCE_TRACE": "yes"}, "MROCE_TRACE"},
		{map[string]string{"MROCE_TRACE": "1", "LOGDIR": ""}, "LOGDIR"},
	} {
		if _, err := ParseEnv(env(c.changes)); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%v: %v, want an error naming %s", c.changes, err, c.msg)
		}
	}
	if _, err := ParseEnv(env(map[string]string{"TESTCASE": "nonesuch"})); !errors.Is(err, ErrUnsupported) {
		t.Errorf("an unknown case: %v", err)
	}
	// A responder needs no PEER.
	if _, err := ParseEnv(env(map[string]string{"ROLE": "responder", "PEER": ""})); err != nil {
		t.Errorf("a responder: %v", err)
	}
}

// freePort is a port free on both addresses with the 16 source ports after
// it, which the endpoints of both roles bind.
func freePort(t *testing.T, addrs ...string) uint16 {
	t.Helper()
	for try := 0; try < 50; try++ {
		p := 20000 + rand.IntN(20000)
		free := true
		for _, a := range addrs {
			for i := 0; i <= 16 && free; i++ {
				c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(a), Port: p + i})
				if err != nil {
					free = false
					break
				}
				c.Close()
			}
		}
		if free {
			return uint16(p)
		}
	}
	t.Fatal("no free port")
	return 0
}

// roles are the configurations of a responder on respAddr and a
// requester on reqAddr for one case of size bytes, on a free port, each
// with a log directory of its own under one temporary directory.
func roles(t *testing.T, testcase string, size int64, respAddr, reqAddr string) (resp, req Config) {
	t.Helper()
	dir := t.TempDir()
	base := Config{Case: testcase, Port: freePort(t, respAddr, reqAddr), Size: size, Requesters: 1}
	resp, req = base, base
	resp.Role, resp.LogDir = Responder, filepath.Join(dir, Responder)
	req.Role, req.LogDir = Requester, filepath.Join(dir, Requester)
	os.Mkdir(resp.LogDir, 0o755)
	os.Mkdir(req.LogDir, 0o755)
	resp.Planes, _ = conformance.ParseAddrs(respAddr)
	req.Planes, _ = conformance.ParseAddrs(reqAddr)
	req.Peer = resp.Planes
	return resp, req
}

// Both roles of every kind of case, in one process on loopback, agree on
// the data and report it as the runner reads it.
func TestRunBothRoles(t *testing.T) {
	const size = 3<<20 + 5 // the last operation is short
	want := sha256.New()
	io.Copy(want, conformance.Data(size))
	sum := hex.EncodeToString(want.Sum(nil))
	for _, testcase := range []string{"transfer", "write", "write-imm", "read"} {
		t.Run(testcase, func(t *testing.T) {
			resp, req := roles(t, testcase, size, "127.0.0.111", "127.0.0.112")
			dir := filepath.Dir(resp.LogDir)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var rerr error
			var wg sync.WaitGroup
			wg.Go(func() { rerr = Run(ctx, resp) })
			for { // until it listens, which it says with the ready file
				if _, err := os.Stat(filepath.Join(resp.LogDir, ReadyFile)); err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(time.Millisecond)
			}
			qerr := Run(ctx, req)
			wg.Wait()
			if rerr != nil || qerr != nil {
				t.Fatalf("responder %v, requester %v", rerr, qerr)
			}
			for _, role := range []string{Responder, Requester} {
				var rep conformance.EndpointReport
				b, err := os.ReadFile(filepath.Join(dir, role, "report.json"))
				if err != nil || json.Unmarshal(b, &rep) != nil {
					t.Fatalf("%s: no report: %v", role, err)
				}
				if rep.Role != role || rep.Bytes != size || rep.SHA256 != sum || rep.Error != "" {
					t.Errorf("%s: %+v, want %d bytes of SHA-256 %s", role, rep, size, sum)
				}
				if role == Requester && (rep.Packets == 0 || rep.ElapsedNS == 0) {
					t.Errorf("the requester reports no packets or time: %+v", rep)
				}
			}
		})
	}
}

// A case that fails still writes its report, with the error, for the
// runner to show.
func TestRunReportsFailure(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Role: Requester, Case: "write", Port: freePort(t, "127.0.0.112"), Size: 1 << 20, Requesters: 1, LogDir: dir}
	cfg.Planes, _ = conformance.ParseAddrs("127.0.0.112")
	cfg.Peer, _ = conformance.ParseAddrs("127.0.0.111") // nobody listens
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, cfg)
	b, rerr := os.ReadFile(filepath.Join(dir, "report.json"))
	if err == nil || rerr != nil || !strings.Contains(string(b), fmt.Sprintf("%q", "error")) {
		t.Fatalf("Run %v; report %v: %s", err, rerr, b)
	}
}

// A requester started before its responder listens connects once the
// responder comes up, a few seconds later: its handshake waits.
func TestLargeRequesterWaitsForASlowResponder(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 2 s in real time")
	}
	resp, req := roles(t, "transfer", 64<<10, "127.0.0.113", "127.0.0.114")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var qerr error
	var wg sync.WaitGroup
	wg.Go(func() { qerr = Run(ctx, req) })
	time.Sleep(2 * time.Second) // past the engine's default connect timeout of 1 s
	rerr := Run(ctx, resp)
	wg.Wait()
	if rerr != nil || qerr != nil {
		t.Fatalf("responder %v, requester %v", rerr, qerr)
	}
}
