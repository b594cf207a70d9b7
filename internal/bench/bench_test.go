package bench

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
)

// pair opens two hosts on loopback and connects them: client and server.
func pair(t *testing.T) (client, server Side) {
	t.Helper()
	open := func(addr string) *endpoint.UDPHost {
		var lastErr error
		for try := 0; try < 20; try++ {
			base := uint16(20000 + rand.IntN(40000))
			cfg := engine.Config{Planes: []netip.Addr{netip.MustParseAddr(addr)}, Port: base, Paths: 4, Streams: 2,
				SourcePorts: []uint16{base + 1, base + 2, base + 3, base + 4}, NoProgress: 10 * time.Second}
			h, err := endpoint.OpenUDP(cfg)
			if err == nil {
				t.Cleanup(func() { h.Close() })
				return h
			}
			lastErr = err
		}
		t.Fatal(lastErr)
		return nil
	}
	a, b := open("127.0.0.73"), open("127.0.0.74")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adev, bdev := a.Device(), b.Device()
	client.PD, _ = adev.AllocPD()
	server.PD, _ = bdev.AllocPD()
	client.Send, client.Recv = adev.CreateCQ(256), adev.CreateCQ(256)
	server.Send, server.Recv = bdev.CreateCQ(256), bdev.CreateCQ(256)
	lis, err := server.PD.Listen(server.Send, server.Recv, endpoint.QPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if client.QP, err = client.PD.Connect(ctx, b.Remote(), client.Send, client.Recv, endpoint.QPOptions{}); err != nil {
		t.Fatal(err)
	}
	if server.QP, err = lis.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	return client, server
}

// Every test runs between a client and a server over real sockets and
// reports figures that hang together: for bandwidth, a peak at least the
// average and a message rate that is the average over the size; for
// latency, min <= typical <= p99 <= p99.9 <= max, an average between min
// and max.
func TestEveryTestRuns(t *testing.T) {
	for _, test := range Tests {
		client, server := pair(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var serr error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _, serr = Serve(ctx, server) }()
		req := Request{Test: test, Sizes: []int{64, 65536}, Iters: 200, Depth: 16}
		var seen []Result
		res, err := Run(ctx, client, req, func(r Result) { seen = append(seen, r) })
		wg.Wait()
		cancel()
		if err != nil || serr != nil {
			t.Fatalf("%s: client %v, server %v", test, err, serr)
		}
		if len(res) != 2 || len(seen) != 2 {
			t.Fatalf("%s: %d results, %d reported", test, len(res), len(seen))
		}
		for _, r := range res {
			if r.Iterations != 200 {
				t.Errorf("%s: %+v", test, r)
			}
			if IsLatency(test) {
				ok := r.TMinUs > 0 && r.TMinUs <= r.TTypicalUs && r.TTypicalUs <= r.P99Us && r.P99Us <= r.P999Us && r.P999Us <= r.TMaxUs &&
					r.TAvgUs >= r.TMinUs && r.TAvgUs <= r.TMaxUs
				if !ok {
					t.Errorf("%s: %+v", test, r)
				}
				continue
			}
			rate := r.BWAvgGbps * 1e9 / 8 / float64(r.Bytes) / 1e6
			if r.BWAvgGbps <= 0 || r.BWPeakGbps < r.BWAvgGbps || rate < 0.99*r.MsgRateMpps || rate > 1.01*r.MsgRateMpps {
				t.Errorf("%s: %+v", test, r)
			}
		}
	}
}

// A request the server cannot run is refused with the reason, and the
// client says so.
func TestBadRequestsAreRefused(t *testing.T) {
	for _, req := range []Request{
		{Test: "write_nothing", Sizes: []int{8}, Iters: 1, Depth: 1},
		{Test: WriteBW, Iters: 1, Depth: 1},
		{Test: WriteBW, Sizes: []int{MaxSize + 1}, Iters: 1, Depth: 1},
		{Test: WriteBW, Sizes: []int{8}, Iters: 0, Depth: 1},
	} {
		if err := req.Validate(); err == nil || !strings.Contains(err.Error(), "bench:") {
			t.Errorf("%+v: %v", req, err)
		}
	}
	if len(Sweep()) != 23 || Sweep()[0] != 2 || Sweep()[22] != 8<<20 {
		t.Errorf("sweep %v", Sweep())
	}
}
