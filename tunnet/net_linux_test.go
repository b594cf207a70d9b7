package tunnet_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/mroce/mroce/app/xfertest"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/tunnet"
)

// needRoot skips the test unless it runs as root with iproute2's ip. With
// MROCE_REQUIRE_NETADMIN set, as in CI, it fails instead.
func needRoot(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("ip")
	if os.Geteuid() == 0 && err == nil {
		return
	}
	msg := "needs root and ip (Debian package iproute2) for network namespaces and TUN devices"
	if os.Getenv("MROCE_REQUIRE_NETADMIN") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// up starts an emulated network for the test and checks, when the test
// ends, that nothing of it is left.
func up(t *testing.T, hosts, planes int, fc netem.Config) *tunnet.Net {
	t.Helper()
	needRoot(t)
	name := fmt.Sprintf("t%d-%d", os.Getpid(), rand.IntN(1e6))
	n, err := tunnet.Up(tunnet.Config{Name: name, Hosts: hosts, Planes: planes, Fabric: fc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		if left, _ := tunnet.List(name); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	return n
}

func fabric(rate int64) netem.Config {
	l := netem.LinkConfig{Rate: rate, Delay: 5 * time.Microsecond, Queue: netem.QueueConfig{Limit: 4 << 20}}
	return netem.Config{Seed: 1, Uplink: l, Downlink: l}
}

// A datagram sent in one host's namespace to another's address on each
// plane crosses the emulator and arrives with its ECN field. The planes are
// separate networks.
func TestDatagramsCrossEveryPlane(t *testing.T) {
	n := up(t, 2, 2, fabric(10e9))
	for p := 0; p < 2; p++ {
		var rx *net.UDPConn
		if err := n.InHost(1, func() (err error) {
			rx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(tunnet.Addr(1, p), 0)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer rx.Close()
		var tx *net.UDPConn
		if err := n.InHost(0, func() (err error) {
			tx, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(tunnet.Addr(0, p), 0)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		msg := []byte(fmt.Sprintf("plane %d", p))
		if _, err := tx.WriteToUDPAddrPort(msg, rx.LocalAddr().(*net.UDPAddr).AddrPort()); err != nil {
			t.Fatal(err)
		}
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 100)
		k, from, err := rx.ReadFromUDPAddrPort(buf)
		if err != nil || !bytes.Equal(buf[:k], msg) || from.Addr() != tunnet.Addr(0, p) {
			t.Fatalf("plane %d: %q from %v, %v", p, buf[:k], from, err)
		}
	}
	if st := n.Stats(); st.Read < 2 || st.Written < 2 || st.WriteErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// openIn opens an mroce host inside emulated host h, on all its planes.
func openIn(t *testing.T, n *tunnet.Net, h, planes, paths int) *software.UDPHost {
	t.Helper()
	var host *software.UDPHost
	err := n.InHost(h, func() error {
		cfg := software.UDPOptions{Port: 4797, Paths: paths, Streams: 1, NoProgress: 20 * time.Second}
		for p := 0; p < planes; p++ {
			cfg.Planes = append(cfg.Planes, tunnet.Addr(h, p))
		}
		for i := 1; i <= 2*paths; i++ {
			cfg.SourcePorts = append(cfg.SourcePorts, uint16(50000+i))
		}
		var err error
		host, err = software.OpenUDP(cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	return host
}

// One mroce connection runs over 4 planes of the emulator on 8 paths. The
// bytes arrive intact and every plane carries its share.
func TestMroceOverFourPlanes(t *testing.T) {
	n := up(t, 2, 4, fabric(10e9))
	a, b := openIn(t, n, 0, 4, 8), openIn(t, n, 1, 4, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const size = 32 << 20
	pair, err := xfertest.Connect(ctx, a.Device(), b.Device(), b.Remote(), size, 3)
	if err != nil {
		t.Fatal(err)
	}
	took, err := pair.Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var perPlane []uint64
	n.Do(func(f *netem.Fabric) { perPlane = f.BytesTo(2) })
	for p, bytes := range perPlane {
		if bytes < size/8 {
			t.Errorf("plane %d carried %d bytes of %d", p, bytes, size)
		}
	}
	t.Logf("32 MiB in %v (%.2f Gb/s) over 4 planes of 10 Gb/s; bytes per plane %v; emulator %+v; sender %+v",
		took.Round(time.Millisecond), xfertest.Gbps(size, took), perPlane, n.Stats(), a.DriverStats())
}
