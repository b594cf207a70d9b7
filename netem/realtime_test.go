package netem

import (
	"context"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// The same fabric runs in real time on a clock.Loop. Datagrams posted from
// another goroutine arrive, no earlier than the path's delay.
func TestRealTimeMode(t *testing.T) {
	loop := clock.NewLoop()
	cfg := twoHosts(simpleLink(gbps, 2*time.Millisecond), simpleLink(gbps, 3*time.Millisecond))
	cfg.Downlink.Impair.Loss = &RandomLoss{P: 0.5}
	f, err := New(cfg, loop)
	if err != nil {
		t.Fatal(err)
	}
	type got struct{ sent, at clock.Time }
	arrivals := make(chan got, 100)
	f.Host(1).Attach(link.ReceiverFunc(func(d *link.Datagram, at clock.Time) {
		var sent clock.Time
		for i := 0; i < 8; i++ {
			sent = sent<<8 | clock.Time(d.Data[i])
		}
		arrivals <- got{sent, at}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go loop.Run(ctx)
	const n = 40
	for i := 0; i < n; i++ {
		loop.Post(func() {
			d := datagram(f, 0, 1, 0, 50000, 100, 0, link.ECT0)
			now := loop.Now()
			for j := 0; j < 8; j++ {
				d.Data[j] = byte(now >> (56 - 8*j))
			}
			f.Host(0).Send([]link.Datagram{d})
		})
	}
	received := 0
	deadline := time.After(5 * time.Second)
	for received < n/4 { // half are lost, so a quarter is a safe floor
		select {
		case a := <-arrivals:
			if a.at-a.sent < clock.Time(5*time.Millisecond) {
				t.Fatalf("arrived %v after sending, faster than the 5 ms of delay", a.at-a.sent)
			}
			received++
		case <-deadline:
			t.Fatalf("only %d of %d datagrams arrived", received, n)
		}
	}
}
