package tunnet_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/app/xfertest"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/tunnet"
)

// planes1G is 4 planes of 1 Gb/s with DCTCP step marking at K = 512 KiB and
// random loss p on every downlink. K is 4 ms at 1 Gb/s, because the
// emulator forwards in turns of its loop and its bursts must not read as
// congestion. A packet crosses one downlink, so data and ACKs alike lose p.
func planes1G(p float64) netem.Config {
	l := netem.LinkConfig{Rate: 1e9, Delay: 5 * time.Microsecond, Queue: netem.QueueConfig{Limit: 4 << 20, ECNThreshold: 512 << 10}}
	down := l
	if p > 0 {
		down.Impair.Loss = &netem.RandomLoss{P: p}
	}
	return netem.Config{Seed: 7, Uplink: l, Downlink: down}
}

// mroceWrite moves size bytes from host 0 to host 1 in one WRITE over 8
// paths and checks them. It returns the goodput in b/s and the bytes each
// plane carried to host 1.
func mroceWrite(t *testing.T, n *tunnet.Net, size int) (float64, []uint64) {
	t.Helper()
	a, b := openIn(t, n, 0, 4, 8), openIn(t, n, 1, 4, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	pair, err := xfertest.Connect(ctx, a.Device(), b.Device(), b.Remote(), size, 5)
	if err != nil {
		t.Fatal(err)
	}
	var before, after []uint64
	n.Do(func(f *netem.Fabric) { before = f.BytesTo(2) })
	took, err := pair.Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n.Do(func(f *netem.Fabric) { after = f.BytesTo(2) })
	for p := range after {
		after[p] -= before[p]
	}
	pair.QP.Close()
	return xfertest.Gbps(size, took) * 1e9, after
}

// tcpStream moves up to size bytes over one kernel TCP connection from host
// 0 to host 1 on plane 0, for at most limit, and checks them. One connection
// is one 5-tuple, which ECMP and routing keep on one plane. It returns the
// goodput in b/s and the bytes moved.
func tcpStream(t *testing.T, n *tunnet.Net, size int, limit time.Duration) (float64, int) {
	t.Helper()
	var ln net.Listener
	if err := n.InHost(1, func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(tunnet.Addr(1, 0), 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{6}).Read(data)
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		got <- b
	}()
	var c net.Conn
	if err := n.InHost(0, func() (err error) {
		c, err = (&net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(tunnet.Addr(0, 0), 0))}).Dial("tcp4", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c.SetWriteDeadline(began.Add(limit))
	sent, _ := c.Write(data) // a deadline cuts a slow transfer short
	c.Close()
	b := <-got
	took := time.Since(began)
	if len(b) > sent || !bytes.Equal(b, data[:len(b)]) {
		t.Fatalf("TCP: %d bytes arrived of %d sent, or wrong", len(b), sent)
	}
	return float64(len(b)) * 8 / took.Seconds(), len(b)
}

// One mroce connection runs through the kernel path on 4 planes of 1 Gb/s,
// at 0%, 1% and 10% random loss on every downlink, each transfer checked
// byte for byte, beside one TCP connection through the same emulator. The
// goodputs and ratios are reported in docs/netem.md, not asserted. The test
// asserts that mroce spreads over every plane, each carrying at least 10%
// of the bytes, while TCP's one 5-tuple stays on one.
func TestLargeThroughTheKernelPath(t *testing.T) {
	if testing.Short() {
		t.Skip("transfers through the kernel path: not in -short")
	}
	const size = 256 << 20 // long enough that the first round trips do not count
	var rows []string
	var mroce0, tcp0 float64
	for _, p := range []float64{0, 0.01, 0.10} {
		n := up(t, 2, 4, planes1G(p))
		m, perPlane := mroceWrite(t, n, size)
		var total uint64
		for _, b := range perPlane {
			total += b
		}
		for plane, b := range perPlane {
			if share := float64(b) / float64(total); share < 0.1 {
				t.Errorf("loss %g: plane %d carried %.0f%% of the bytes", p, plane, 100*share)
			}
		}
		tcp, moved := tcpStream(t, n, 32<<20, 5*time.Second)
		if p == 0 {
			mroce0, tcp0 = m, tcp
		}
		rows = append(rows, fmt.Sprintf("loss %4.1f%%: mroce %.2f Gb/s (%.3f of the 4 Gb/s; %.3f of loss-free), TCP %.3f Gb/s (%.3f of loss-free, %d MiB moved)",
			100*p, m/1e9, m/4e9, m/mroce0, tcp/1e9, tcp/tcp0, moved>>20))
		n.Close()
	}
	t.Log("\n" + strings.Join(rows, "\n"))
}
