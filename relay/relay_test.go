package relay

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/mroce/mroce/app/xfertest"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/netem"
)

// loopbackOnly skips where 127.0.0.0/8 is not all local. Only Linux answers
// every loopback address without configuration.
func loopbackOnly(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the default addresses need Linux's whole 127.0.0.0/8 loopback")
	}
}

// ports returns the test's ports, a receive port and a source-port pool. They
// start from a random base so that runs do not meet.
func ports(n int) []uint16 {
	base := uint16(20000 + rand.IntN(30000))
	out := []uint16{base}
	for i := 1; i <= n; i++ {
		out = append(out, base+uint16(i))
	}
	return out
}

func start(t *testing.T, cfg Config) *Relay {
	t.Helper()
	loopbackOnly(t)
	var r *Relay
	var err error
	for try := 0; try < 10; try++ {
		if r, err = Start(cfg); err == nil {
			t.Cleanup(func() { r.Close() })
			return r
		}
		cfg.Ports = ports(len(cfg.Ports) - 1)
	}
	t.Fatal(err)
	return nil
}

func links(rate int64) netem.Config {
	l := netem.LinkConfig{Rate: rate, Delay: 5 * time.Microsecond, Queue: netem.QueueConfig{Limit: 4 << 20, ECNThreshold: 512 << 10}}
	return netem.Config{Seed: 1, Uplink: l, Downlink: l}
}

// A datagram from a host's real address to another's virtual address is
// relayed through the fabric. It arrives from the sender's virtual address
// with its source port kept, and a reply goes back the same way. A datagram
// from an address that is no host's is dropped and counted.
func TestRelayKeepsPortsBothWays(t *testing.T) {
	cfg := Config{Hosts: 2, Planes: 2, Ports: ports(2), Fabric: links(10e9)}
	r := start(t, cfg)
	ps := r.cfg.Ports
	listen := func(a netip.Addr, port uint16) *net.UDPConn {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		return c
	}
	for p := 0; p < 2; p++ {
		a := listen(RealAddr(0, p), ps[1]) // host 0, from a source port
		b := listen(RealAddr(1, p), ps[0]) // host 1, its receive port
		if _, err := a.WriteToUDPAddrPort([]byte("ping"), netip.AddrPortFrom(VirtualAddr(1, p), ps[0])); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		k, from, err := b.ReadFromUDPAddrPort(buf)
		if err != nil || string(buf[:k]) != "ping" || from != netip.AddrPortFrom(VirtualAddr(0, p), ps[1]) {
			t.Fatalf("plane %d: %q from %v, %v", p, buf[:k], from, err)
		}
		if _, err := b.WriteToUDPAddrPort([]byte("pong"), from); err != nil {
			t.Fatal(err)
		}
		k, from, err = a.ReadFromUDPAddrPort(buf)
		if err != nil || string(buf[:k]) != "pong" || from != netip.AddrPortFrom(VirtualAddr(1, p), ps[0]) {
			t.Fatalf("plane %d reply: %q from %v, %v", p, buf[:k], from, err)
		}
	}
	stranger, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 77)})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	stranger.WriteToUDPAddrPort([]byte("?"), netip.AddrPortFrom(VirtualAddr(1, 0), ps[0]))
	deadline := time.Now().Add(5 * time.Second)
	for r.Stats().Unknown == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := r.Stats(); st.Unknown != 1 || st.Relayed != 4 || st.Delivered != 4 {
		t.Fatalf("stats %+v: want 4 relayed and delivered, 1 unknown", st)
	}
}

// One mroce connection runs through the relay without root, on 4 planes and
// 8 paths. The bytes arrive intact and every plane carries some.
func TestMroceThroughTheRelay(t *testing.T) {
	ps := ports(16)
	r := start(t, Config{Hosts: 2, Planes: 4, Ports: ps, Fabric: links(1e9)})
	ps = r.cfg.Ports
	open := func(h int) *software.UDPHost {
		cfg := software.UDPOptions{Port: ps[0], SourcePorts: ps[1:], Paths: 8, Streams: 1, NoProgress: 20 * time.Second}
		for p := 0; p < 4; p++ {
			cfg.Planes = append(cfg.Planes, RealAddr(h, p))
		}
		host, err := software.OpenUDP(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { host.Close() })
		return host
	}
	a, b := open(0), open(1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	remote := endpoint.Remote{Port: ps[0]}
	for p := 0; p < 4; p++ {
		remote.Planes = append(remote.Planes, VirtualAddr(1, p))
	}
	const size = 32 << 20
	pair, err := xfertest.Connect(ctx, a.Device(), b.Device(), remote, size, 8)
	if err != nil {
		t.Fatal(err)
	}
	took, err := pair.Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var perPlane []uint64
	r.Do(func(f *netem.Fabric) { perPlane = f.BytesTo(2) })
	for p, n := range perPlane {
		if n < size/10 {
			t.Errorf("plane %d carried %d bytes of %d", p, n, size)
		}
	}
	t.Logf("32 MiB in %v (%.2f Gb/s over 4 planes of 1 Gb/s); bytes per plane %v; relay %+v",
		took.Round(time.Millisecond), xfertest.Gbps(size, took), perPlane, r.Stats())
}
