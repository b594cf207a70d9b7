package perftest

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mroce/mroce/app/xfertest"
)

// pair connects two hosts on loopback and returns the client's end and
// the server's.
func pair(t *testing.T) (Side, Side) {
	t.Helper()
	c, s := xfertest.Loopback(t, "127.0.0.73", "127.0.0.74")
	return Side(c), Side(s)
}

// Every test runs between a client and a server over real sockets and
// reports figures that hang together. For bandwidth the peak is at least
// the average and the message rate is the average over the size. For
// latency min <= typical <= p99 <= p99.9 <= max, and the average lies
// between min and max. The two ends describe one connection: each names
// the other's identity and region key, but for the client's key at the
// server of a bandwidth test, which it never learns.
func TestEveryTestRuns(t *testing.T) {
	for _, test := range Tests {
		client, server := pair(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var serr error
		var wg sync.WaitGroup
		wg.Add(1)
		var atServer, atClient Ends
		go func() {
			defer wg.Done()
			_, serr = Serve(ctx, server, "", func(_ Request, e Ends) { atServer = e })
		}()
		req := Request{Test: test, Sizes: []int{64, 65536}, Iters: 200, Depth: 16}
		var seen []Result
		res, err := Run(ctx, client, req, func(e Ends) { atClient = e }, func(r Result) { seen = append(seen, r) })
		wg.Wait()
		cancel()
		if err != nil || serr != nil {
			t.Fatalf("%s: client %v, server %v", test, err, serr)
		}
		clientKey := atClient.LocalRKey
		if !IsLatency(test) {
			clientKey = 0
		}
		if atClient.Params.Local != atServer.Params.Peer || atServer.Params.Local != atClient.Params.Peer ||
			atClient.Params.Local.ConnID == 0 || atClient.RemoteRKey != atServer.LocalRKey || atServer.RemoteRKey != clientKey ||
			atClient.LocalRKey == 0 || atServer.LocalRKey == 0 {
			t.Errorf("%s: the ends disagree: client %+v, server %+v", test, atClient, atServer)
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
		if err := req.Validate(); err == nil || !strings.Contains(err.Error(), "perftest:") {
			t.Errorf("%+v: %v", req, err)
		}
	}
	if len(Sweep()) != 23 || Sweep()[0] != 2 || Sweep()[22] != 8<<20 {
		t.Errorf("sweep %v", Sweep())
	}
}

// A server answers a request it will not run with a refusal in the
// response, over the wire: a request that is not JSON, and one for another
// test than the one it serves (docs/apps.md). The client reports the
// reason.
func TestServerRefusesInTheResponse(t *testing.T) {
	for _, c := range []struct {
		name, serves string
		raw          []byte
		want         string
	}{
		{"not JSON", "", []byte("write_bw please"), "not JSON"},
		{"another test", WriteBW, nil, "this server serves write_bw, not send_bw"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, server := pair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var serr error
			var wg sync.WaitGroup
			wg.Go(func() { _, serr = Serve(ctx, server, c.serves, nil) })
			var msg any = Request{Test: SendBW, Sizes: []int{64}, Iters: 1, Depth: 1}
			if c.raw != nil {
				msg = c.raw
			}
			var resp Response
			err := exchange(ctx, client, msg, &resp)
			wg.Wait()
			if err != nil || !strings.Contains(resp.Error, c.want) || resp.RKey != 0 {
				t.Fatalf("response %+v (%v), want a refusal naming %q", resp, err, c.want)
			}
			if serr == nil || !strings.Contains(serr.Error(), c.want) {
				t.Fatalf("the server returned %v", serr)
			}
		})
	}
}

// The peak bandwidth never exceeds the rate the operations completed at,
// however the completions are seen: in batches of 1 to 200 at random
// times, and all at once after the application was away for 5 ms.
func TestPeakNeverAboveTheLine(t *testing.T) {
	const n, ops = 4096, 5000
	every := time.Duration(float64(n*8) / 1e9 * float64(time.Second)) // 1 Gb/s
	began := time.Unix(0, 0)
	completedBy := func(at time.Time) int { return min(ops, int(at.Sub(began)/every)) }
	rng := rand.New(rand.NewPCG(7, 7))
	marks := []mark{{began, 0}}
	at := began
	for done := 0; done < ops; {
		at = at.Add(time.Duration(1+rng.IntN(200)) * every)
		if rng.IntN(50) == 0 {
			at = at.Add(5 * time.Millisecond) // away: the completions pile up
		}
		done = completedBy(at)
		marks = append(marks, mark{at, done})
	}
	peak := peakGbps(marks, n, ops/10)
	if peak > 1.01 || peak < 0.9 {
		t.Fatalf("peak %.3f Gb/s of operations that completed at 1 Gb/s", peak)
	}
}

// With a duration, each size runs for about that long and reports the
// operations it ran, at least one, however many Iters allows.
func TestDurationBoundsEachSize(t *testing.T) {
	for _, test := range []string{WriteBW, WriteLat} {
		client, server := pair(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var wg sync.WaitGroup
		var serr error
		wg.Go(func() { _, serr = Serve(ctx, server, "", nil) })
		began := time.Now()
		res, err := Run(ctx, client, Request{Test: test, Sizes: []int{64, 4096}, Iters: MaxIters, Depth: 16, Duration: 100 * time.Millisecond}, nil, nil)
		took := time.Since(began)
		wg.Wait()
		cancel()
		if err != nil || serr != nil {
			t.Fatalf("%s: client %v, server %v", test, err, serr)
		}
		if len(res) != 2 || took < 200*time.Millisecond || took > 20*time.Second {
			t.Fatalf("%s: %d results in %v, want 2 sizes of 100 ms each", test, len(res), took)
		}
		for _, r := range res {
			if r.Iterations < 1 || r.Iterations >= MaxIters {
				t.Errorf("%s: %+v", test, r)
			}
		}
	}
}

// A size that runs for seconds keeps few marks, and the peak taken over
// them is the peak taken over every one: 4 s of waits 2 µs apart, with
// pauses, keep under 20,000 marks of 2,000,000, and the two peaks agree
// within 1%.
func TestMarksStayFewOverLongRuns(t *testing.T) {
	const n = 64
	began := time.Unix(0, 0)
	rng := rand.New(rand.NewPCG(3, 3))
	all, kept := []mark{{began, 0}}, []mark{{began, 0}}
	at, done := began, 0
	for at.Sub(began) < 4*time.Second {
		at = at.Add(2 * time.Microsecond)
		if rng.IntN(100_000) == 0 {
			at = at.Add(3 * time.Millisecond)
		}
		done += 1 + rng.IntN(3)
		all = append(all, mark{at, done})
		kept = addMark(kept, mark{at, done})
	}
	if len(kept) >= 20_000 {
		t.Fatalf("%d marks kept of %d", len(kept), len(all))
	}
	full, thin := peakGbps(all, n, done/10), peakGbps(kept, n, done/10)
	if thin > full || thin < 0.99*full {
		t.Fatalf("peak %.4f Gb/s over the kept marks, %.4f over all", thin, full)
	}
}
