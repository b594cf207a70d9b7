package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/app/perftest"
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
	for _, col := range []string{"#bytes", "#iterations", "BW peak[Gb/sec]", "BW average[Gb/sec]", "MsgRate[Mpps]", "RDMA_Write BW Test"} {
		if !strings.Contains(r.stdout, col) {
			t.Errorf("no %q in\n%s", col, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "\n 4096       300 ") {
		t.Errorf("no row for 4096 bytes, 300 iterations:\n%s", r.stdout)
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
		{[]string{"bench", "write_bw"}, "--to (the server's addresses) or --server"},
		{[]string{"bench", "write_bw", "--to", "127.0.0.1", "--size", "0"}, "size 0: want 1 to"},
		{[]string{"bench", "send_bw", "--to", "127.0.0.1", "--tx-depth", "0"}, "depth 0"},
		{[]string{"bench", "read_bw", "--to", "127.0.0.1", "extra"}, "no arguments"},
	} {
		r := runCLI(t, "", c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, r.code, r.stderr, c.msg)
		}
	}
}
