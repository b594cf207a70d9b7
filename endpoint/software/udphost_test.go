package software

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/proto"
)

// openUDP opens a host on planes with paths paths, trying other ports if
// some are taken; it closes when the test ends.
func openUDP(t *testing.T, planes []string, paths int) *UDPHost {
	t.Helper()
	return openUDPWith(t, planes, paths, UDPOptions{Streams: 4, NoProgress: 10 * time.Second})
}

// openUDPWith opens a host on planes with paths paths and the other
// options of o, on free ports, and closes it when the test ends.
func openUDPWith(t *testing.T, planes []string, paths int, o UDPOptions) *UDPHost {
	t.Helper()
	var lastErr error
	for try := 0; try < 20; try++ {
		base := uint16(20000 + rand.IntN(40000))
		cfg := o
		cfg.Port, cfg.Paths, cfg.Planes, cfg.SourcePorts = base, paths, nil, nil
		for _, p := range planes {
			cfg.Planes = append(cfg.Planes, netip.MustParseAddr(p))
		}
		for i := 1; i <= paths; i++ {
			cfg.SourcePorts = append(cfg.SourcePorts, base+uint16(i))
		}
		h, err := OpenUDP(cfg)
		if err == nil {
			t.Cleanup(func() { h.Close() })
			return h
		}
		lastErr = err
	}
	t.Fatalf("no free ports: %v", lastErr)
	return nil
}

// The verbs flow over real UDP sockets in real time. Two hosts on
// loopback connect, SEND, WRITE and READ, wait for completions through
// the completion queues, check the bytes and read the paths' telemetry.
func TestVerbsOverUDP(t *testing.T) {
	server := openUDP(t, []string{"127.0.0.61", "127.0.0.62"}, 4)
	client := openUDP(t, []string{"127.0.0.63", "127.0.0.64"}, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	qp := verbsFlow(t, ctx, server.Device(), client.Device(), server.Remote(), 4<<20)
	tel := qp.Telemetry()
	if len(tel) != 4 {
		t.Fatalf("telemetry of %d paths", len(tel))
	}
	for _, p := range tel {
		if p.PacketsSent == 0 || p.RTT.Samples == 0 {
			t.Errorf("path %d carried nothing: %+v", p.Path, p)
		}
	}
	if st := server.DriverStats(); st.Received == 0 || st.ECNSeen == 0 {
		t.Errorf("server driver %+v", st)
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
}

// Progress waits for a condition met later, and gives up when its context
// ends.
func TestLoopRunnerProgress(t *testing.T) {
	loop := clock.NewLoop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewLoopRunner(loop)
	go r.Run(ctx)
	n := 0 // the loop's
	go func() {
		for i := 0; i < 5; i++ {
			r.Do(func() { n++ })
		}
	}()
	if err := r.Progress(ctx, func() bool { return n == 5 }); err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 20*time.Millisecond)
	defer stop()
	if err := r.Progress(short, func() bool { return n == 6 }); err == nil {
		t.Fatal("a condition that never holds was met")
	}
}

// A tap sees what a host sends and receives, both ways, with the engine
// none the wiser.
func TestUDPHostTap(t *testing.T) {
	var sent, received int
	tap := func(d *link.Datagram, out bool) {
		if out {
			sent++
		} else {
			received++
		}
	}
	var server *UDPHost
	for try := 0; try < 20 && server == nil; try++ {
		base := uint16(20000 + rand.IntN(40000))
		server, _ = OpenUDP(UDPOptions{Planes: []netip.Addr{netip.MustParseAddr("127.0.0.65")}, Port: base, Paths: 2, Streams: 4,
			SourcePorts: []uint16{base + 1, base + 2}, NoProgress: 10 * time.Second, Tap: tap})
	}
	if server == nil {
		t.Fatal("no free ports")
	}
	defer server.Close()
	client := openUDP(t, []string{"127.0.0.66"}, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	verbsFlow(t, ctx, server.Device(), client.Device(), server.Remote(), 256<<10).Close()
	var s, r int
	server.Backend().runner.Do(func() { s, r = sent, received })
	if s == 0 || r < 2*(256<<10)/9000 { // the SEND and the WRITE alone are that many data packets
		t.Fatalf("the tap saw %d sent, %d received", s, r)
	}
}

// Placeholder payloads carry no CRC and stale bytes, so a socket refuses
// them.
func TestOpenUDPRefusesPlaceholderPayloads(t *testing.T) {
	cfg := engine.Config{Port: 29999, Planes: []netip.Addr{netip.MustParseAddr("127.0.0.65")}, PlaceholderPayloads: true}
	if h, err := OpenUDPEngine(cfg); err == nil {
		h.Close()
		t.Fatal("a UDP host opened with placeholder payloads")
	}
}

// The options are what a user sets. Each reaches the engine, the baseline
// mode included, and a host without planes or a port is refused.
func TestUDPOptionsReachTheEngine(t *testing.T) {
	o := UDPOptions{Planes: []netip.Addr{netip.MustParseAddr("127.0.0.67")}, Port: 4791, SourcePorts: []uint16{4792},
		Paths: 3, Streams: 5, MaxPacket: 2048, InboundCapacity: 1e9, NoProgress: time.Second, ConnectTimeout: 2 * time.Second,
		Baseline: true}
	cfg := o.EngineConfig()
	if cfg.Planes[0] != o.Planes[0] || cfg.Port != 4791 || cfg.SourcePorts[0] != 4792 || cfg.Paths != 3 || cfg.Streams != 5 ||
		cfg.MaxPacket != 2048 || cfg.InboundCapacity != 1e9 || cfg.NoProgress != time.Second ||
		cfg.ConnectTimeout != 2*time.Second || cfg.Mode != proto.ModeBaseline {
		t.Fatalf("engine configuration %+v from %+v", cfg, o)
	}
	if h, err := OpenUDP(UDPOptions{Port: 4791}); err == nil {
		h.Close()
		t.Fatal("a UDP host opened without planes")
	}
	if h, err := OpenUDP(UDPOptions{Planes: o.Planes}); err == nil {
		h.Close()
		t.Fatal("a UDP host opened without a port")
	}
}
