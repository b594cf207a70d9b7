package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/app/host"
	"github.com/mroce/mroce/app/perftest"
	"github.com/mroce/mroce/endpoint"
)

// serveBench runs one bench server for test on a free port of addr and
// returns the port and where its result goes. It calls the function rather
// than the command line, because two command lines at once in one process
// race inside the flag library.
func serveBench(t *testing.T, test, addr string) (int, chan error) {
	t.Helper()
	port := freePort(t, addr)
	done := make(chan error, 1)
	go func() {
		o := transferOptions{port: uint16(port), paths: 4, sourcePorts: 8, noProgress: 30 * time.Second, json: true}
		var out bytes.Buffer
		done <- runBenchServer(context.Background(), &out, test, []netip.Addr{netip.MustParseAddr(addr)}, o)
	}()
	time.Sleep(200 * time.Millisecond)
	return port, done
}

// mroce bench's client prints perftest's columns, one row per size, and
// with --json one document whose results carry the same figures.
func TestBenchClient(t *testing.T) {
	port, done := serveBench(t, perftest.WriteBW, "127.0.0.97")
	r := runCLI(t, "", "bench", "write_bw", "--to", "127.0.0.97", "--port", fmt.Sprint(port), "--paths", "4", "--size", "4096", "--iters", "300")
	if err := <-done; err != nil || r.code != 0 {
		t.Fatalf("server %v; client exit %d: %s", err, r.code, r.stderr)
	}
	for _, col := range []string{"#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]", "RDMA_Write BW Test",
		"TX depth        : 128", "Mtu             : "} {
		if !strings.Contains(r.stdout, col) {
			t.Errorf("no %q in\n%s", col, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "\n 4096       300 ") {
		t.Errorf("no row for 4096 bytes, 300 iterations:\n%s", r.stdout)
	}
	// perftest's connection header: each end's QPN (the connection id),
	// PSN and RKey, the two ends apart.
	ends := regexp.MustCompile(`(?m)^ (local|remote) address: +QPN (0x[0-9a-f]{8}) PSN 0x[0-9a-f]{8} DSN 0x[0-9a-f]{8} RKey (0x[0-9a-f]{16})$`).FindAllStringSubmatch(r.stdout, -1)
	if len(ends) != 2 || ends[0][1] != "local" || ends[1][1] != "remote" || ends[0][2] == ends[1][2] || ends[0][3] == ends[1][3] {
		t.Errorf("no local and remote address lines:\n%s", r.stdout)
	}

	// --report_gbits: Gb/sec, as perftest's.
	port, done = serveBench(t, perftest.WriteBW, "127.0.0.97")
	r = runCLI(t, "", "bench", "write_bw", "127.0.0.97", "-p", fmt.Sprint(port), "--paths", "4", "--size", "4096", "-n", "300", "--report_gbits", "-F")
	if err := <-done; err != nil || r.code != 0 || !strings.Contains(r.stdout, "BW peak[Gb/sec]") || !strings.Contains(r.stdout, "BW average[Gb/sec]") {
		t.Fatalf("server %v; client exit %d: %s%s", err, r.code, r.stdout, r.stderr)
	}

	// As perftest: the server's address as the argument, -p for the port,
	// and latency at 2 bytes unless told.
	port, done = serveBench(t, perftest.WriteLat, "127.0.0.97")
	r = runCLI(t, "", "bench", "write_lat", "127.0.0.97", "-p", fmt.Sprint(port), "--paths", "4", "--iters", "20", "--json")
	if err := <-done; err != nil || r.code != 0 || !strings.Contains(r.stdout, `"bytes": 2,`) {
		t.Fatalf("server %v; client exit %d: %s%s", err, r.code, r.stdout, r.stderr)
	}

	port, done = serveBench(t, perftest.WriteLat, "127.0.0.97")
	r = runCLI(t, "", "bench", "write_lat", "--to", "127.0.0.97", "--port", fmt.Sprint(port), "--paths", "4", "--size", "8", "--iters", "200", "--json")
	if err := <-done; err != nil || r.code != 0 {
		t.Fatalf("server %v; client exit %d: %s", err, r.code, r.stderr)
	}
	var doc struct {
		Test    string            `json:"test"`
		Results []perftest.Result `json:"results"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if doc.Test != "write_lat" || len(doc.Results) != 1 || doc.Results[0].Bytes != 8 || doc.Results[0].Iterations != 200 ||
		doc.Results[0].TTypicalUs <= 0 || doc.Results[0].P999Us < doc.Results[0].TTypicalUs {
		t.Fatalf("%+v", doc)
	}
}

// Bad bench command lines are usage errors.
func TestBenchErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"bench", "write_bw"}, "the server's addresses (--to, or the argument) or --server"},
		{[]string{"bench", "write_bw", "--to", "127.0.0.1", "--size", "0"}, "size 0: want 1 to"},
		{[]string{"bench", "send_bw", "--to", "127.0.0.1", "--tx-depth", "0"}, "depth 0"},
		{[]string{"bench", "read_bw", "--to", "127.0.0.1", "extra"}, "one argument at most, the server's address"},
		{[]string{"bench", "read_bw", "127.0.0.1", "127.0.0.2"}, "one argument at most"},
	} {
		r := runCLI(t, "", c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, r.code, r.stderr, c.msg)
		}
	}
}

// benchClientHost opens a client host on addr for a test that plays a
// bench client by hand, with a perftest side connected to the server on
// port of to.
func benchClientHost(t *testing.T, addr, to string, port int) (*host.Host, perftest.Side) {
	t.Helper()
	h, err := host.Open([]netip.Addr{netip.MustParseAddr(addr)}, host.Options{Paths: 4, SourcePorts: 4, NoProgress: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	s, err := perftest.NewSide(h.Device())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	remote := endpoint.Remote{Planes: []netip.Addr{netip.MustParseAddr(to)}, Port: uint16(port)}
	if s.QP, err = s.PD.Connect(ctx, remote, s.Send, s.Recv, endpoint.QPOptions{}); err != nil {
		t.Fatal(err)
	}
	return h, s
}

// A bench server outlives the connections that end before their test
// request. A stray CONNECT never completes, so it never reaches the
// server. A client that connects and closes, and one that connects and
// dies, are let go, and the next client's test runs and ends the server
// as usual. A client that fails once its test runs ends the server with
// an error.
func TestBenchServerOutlivesClientsThatLeave(t *testing.T) {
	const addr = "127.0.0.98"
	port := freePort(t, addr)
	var log lockedBuffer
	done := make(chan error, 1)
	go func() {
		o := transferOptions{port: uint16(port), paths: 4, sourcePorts: 8, noProgress: 2 * time.Second, json: true,
			log: slog.New(slog.NewTextHandler(&log, nil))}
		done <- runBenchServer(context.Background(), io.Discard, perftest.WriteBW, []netip.Addr{netip.MustParseAddr(addr)}, o)
	}()
	time.Sleep(200 * time.Millisecond)
	stray, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(port))))
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close()
	stray.Write(connectPacket(12345, uint16(stray.LocalAddr().(*net.UDPAddr).Port)))
	left := func() int { return strings.Count(log.String(), "left before its test request") }
	waitLeft := func(n int, within time.Duration) {
		t.Helper()
		for end := time.Now().Add(within); left() < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the server let %d clients go in %v, want %d; log:\n%s", left(), within, n, log.String())
			}
		}
	}
	// A client that closes before its request: the server has accepted
	// it, since it waits in Accept, and sees it end.
	_, closer := benchClientHost(t, "127.0.0.99", addr, port)
	time.Sleep(100 * time.Millisecond)
	closer.QP.Close()
	waitLeft(1, 2*time.Second)
	// A client that dies before its request: the server hears nothing more
	// and gives up on it after its 2 s --timeout.
	dying, _ := benchClientHost(t, "127.0.0.99", addr, port)
	time.Sleep(100 * time.Millisecond)
	dying.Close()
	waitLeft(2, 5*time.Second)
	select {
	case err := <-done:
		t.Fatalf("the server ended before a client ran its test: %v", err)
	default:
	}
	r := runCLI(t, "", "bench", "write_bw", "--to", addr, "--port", fmt.Sprint(port), "--paths", "4", "--size", "4096", "--iters", "300")
	if err := <-done; err != nil || r.code != 0 {
		t.Fatalf("server %v; client exit %d: %s", err, r.code, r.stderr)
	}

	// A client whose test fails once it runs ends the server with an
	// error.
	port = freePort(t, addr)
	go func() {
		o := transferOptions{port: uint16(port), paths: 4, sourcePorts: 8, noProgress: 2 * time.Second, json: true}
		done <- runBenchServer(context.Background(), io.Discard, perftest.WriteBW, []netip.Addr{netip.MustParseAddr(addr)}, o)
	}()
	time.Sleep(200 * time.Millisecond)
	_, client := benchClientHost(t, "127.0.0.99", addr, port)
	running := make(chan error, 1)
	go func() {
		_, err := perftest.Run(context.Background(), client, perftest.Request{Test: perftest.WriteBW, Sizes: []int{65536}, Iters: 10_000_000, Depth: 16}, nil, nil)
		running <- err
	}()
	time.Sleep(500 * time.Millisecond)
	client.QP.Close()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, perftest.ErrNoRequest) {
			t.Fatalf("the server of a test that failed: %v, want its error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server still runs 10 s after its client failed mid-test")
	}
	<-running
}

// A bench server started for one test refuses a client that asks for
// another in its answer, and then closes the connection (docs/apps.md,
// section 3): the client learns why and sees a CLOSE NORMAL.
func TestBenchServerRefusesAnotherTestAndCloses(t *testing.T) {
	port, done := serveBench(t, perftest.WriteBW, "127.0.0.97")
	_, s := benchClientHost(t, "127.0.0.98", "127.0.0.97", port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := perftest.Run(ctx, s, perftest.Request{Test: perftest.SendBW, Sizes: []int{64}, Iters: 1, Depth: 1}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "this server serves write_bw, not send_bw") {
		t.Fatalf("client: %v", err)
	}
	if serr := <-done; serr == nil {
		t.Fatal("the server reports success for a test it refused")
	}
	for {
		st, cerr := s.QP.State()
		if st == endpoint.Closed {
			if !endpoint.ClosedNormally(cerr) {
				t.Fatalf("the connection ended with %v", cerr)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the server did not close the connection")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Bandwidth is printed in perftest's units: MB/sec of 2^20 bytes, so that
// 1 Gb/s, 125,000,000 bytes a second, is 119.209 MB/sec; or Gb/sec as is.
// A latency test keeps one message in flight whatever its depth.
func TestBenchUnitsAndDepth(t *testing.T) {
	if unit, per := bandwidthUnit(false); unit != "MB/sec" || math.Abs(per-125e6/1048576) > 1e-9 {
		t.Errorf("MB/sec: %s, %v a Gb/s", unit, per)
	}
	if unit, per := bandwidthUnit(true); unit != "Gb/sec" || per != 1 {
		t.Errorf("Gb/sec: %s, %v a Gb/s", unit, per)
	}
	if d := txDepth(perftest.Request{Test: perftest.WriteLat, Depth: 128}); d != 1 {
		t.Errorf("write_lat: depth %d", d)
	}
	if d := txDepth(perftest.Request{Test: perftest.ReadBW, Depth: 64}); d != 64 {
		t.Errorf("read_bw: depth %d", d)
	}
}
