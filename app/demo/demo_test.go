package demo

import (
	"context"
	"testing"
	"time"

	"github.com/mroce/mroce/app/xferstats"
)

var small = Options{SizeMiB: 2, Planes: 2, Paths: 4, Streams: 2, Loss: 0.02, RateGbps: 100, Delay: 2 * time.Microsecond,
	Interval: 20 * time.Microsecond, Seed: 3}

// The demo's WRITE arrives whole through a lossy fabric that lost data
// packets, which the paths resent. The ticks are the intervals the result
// keeps, and they add up to what the paths carried.
func TestRun(t *testing.T) {
	var ticks []xferstats.Interval
	res, err := Run(context.Background(), small, func(iv xferstats.Interval) { ticks = append(ticks, iv) })
	if err != nil {
		t.Fatal(err)
	}
	var retx, sent uint64
	for _, p := range res.Telemetry {
		retx += p.Retransmits
		sent += p.BytesSent
	}
	if res.Size != 2<<20 || res.Elapsed <= 0 || res.LostData == 0 || retx == 0 || len(res.Telemetry) != 4 {
		t.Errorf("%d bytes in %v, %d lost, %d resent, %d paths", res.Size, res.Elapsed, res.LostData, retx, len(res.Telemetry))
	}
	var sum int64
	for _, iv := range res.Intervals {
		sum += iv.Bytes
	}
	if len(ticks) < 2 || len(ticks) != len(res.Intervals) || sum != int64(sent) {
		t.Errorf("%d ticks, %d intervals of %d bytes, the paths sent %d", len(ticks), len(res.Intervals), sum, sent)
	}
}

// A seed gives the same run every time.
func TestRunRepeats(t *testing.T) {
	a, err := Run(context.Background(), small, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), small, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Elapsed != b.Elapsed || a.LostData != b.LostData {
		t.Errorf("two runs of one seed: %v and %v, %d and %d lost", a.Elapsed, b.Elapsed, a.LostData, b.LostData)
	}
}
