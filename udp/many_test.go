package udp

import (
	"bytes"
	crand "crypto/rand"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
)

// counter counts a connection's establishment and completions across all
// connections of a test.
type counter struct {
	established, ok, failed *atomic.Int64
	first                   *atomic.Value // the first failure, a string
}

func (c counter) Completion(_ *engine.Conn, wc engine.Completion) {
	if wc.Status == engine.StatusOK {
		c.ok.Add(1)
	} else {
		c.failed.Add(1)
		c.first.CompareAndSwap(nil, fmt.Sprintf("%v: %v", wc.Status, wc.Err))
	}
}

func (c counter) State(_ *engine.Conn, s engine.ConnState, err error) {
	switch {
	case err != nil:
		c.failed.Add(1)
		c.first.CompareAndSwap(nil, err.Error())
	case s == engine.Established:
		c.established.Add(1)
	}
}

// 4,000 connections between two endpoints are all established, then all
// WRITE their own 64 KiB of one region at once. Each endpoint has one pool
// of 10 sockets, 2 planes × (receive port + 4 source ports). Every byte
// arrives.
func TestLargeManyConnectionsShareOnePool(t *testing.T) {
	if testing.Short() {
		t.Skip("4,000 connections: not in -short")
	}
	const conns, each = 4000, 64 << 10
	loop := runningLoop(t)
	small := func(c *engine.Config) { c.PathWindow, c.DSNWindow, c.Streams = 16, 64, 1 }
	a := bindSideWith(t, loop, addrs([]string{"127.0.0.1", "127.0.0.2"}), 4, small)
	b := bindSideWith(t, loop, addrs([]string{"127.0.0.3", "127.0.0.4"}), 4, small)
	defer a.drv.Close()
	defer b.drv.Close()
	a.drv.Start(a.ep)
	b.drv.Start(b.ep)
	if n := len(a.drv.socks) + len(b.drv.socks); n != 20 {
		t.Fatalf("%d sockets, want 10 per endpoint", n)
	}

	src := make([]byte, conns*each)
	crand.Read(src)
	dst := make([]byte, conns*each)
	ca := counter{new(atomic.Int64), new(atomic.Int64), new(atomic.Int64), new(atomic.Value)}
	cb := counter{new(atomic.Int64), new(atomic.Int64), new(atomic.Int64), new(atomic.Value)}
	var srcReg, dstReg *memreg.Region
	var err error
	onLoop(loop, func() {
		b.ep.Listen(b.pd, func(*engine.Conn) (engine.Events, bool) { return cb, true })
		if srcReg, err = a.pd.Register(src, memreg.LocalWrite); err == nil {
			dstReg, err = b.pd.Register(dst, memreg.LocalWrite|memreg.RemoteWrite)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]*engine.Conn, 0, conns)
	start := time.Now()
	for len(all) < conns { // in waves below the acceptor's handshake cap
		n := min(500, conns-len(all))
		onLoop(loop, func() {
			for i := 0; i < n && err == nil; i++ {
				var c *engine.Conn
				c, err = a.ep.Connect(b.cfg.Planes, b.cfg.Port, a.pd, ca)
				all = append(all, c)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		want := int64(len(all))
		if !waitFor(30*time.Second, func() bool { return ca.established.Load() >= want || ca.failed.Load() > 0 }) || ca.failed.Load() > 0 {
			t.Fatalf("%d of %d established, %d failed, the first with %v", ca.established.Load(), want, ca.failed.Load(), ca.first.Load())
		}
	}
	setup := time.Since(start)
	// All 4,000 WRITE at once. Their first windows of 16 packets each, the
	// whole 250 MiB, overflow the receiving socket's buffer, and on
	// loopback nothing marks ECN to slow them, as docs/udp.md explains. The
	// transfer recovers from the drops, which the log reports.
	onLoop(loop, func() {
		for i := 0; i < conns && err == nil; i++ {
			off := uint64(i * each)
			err = all[i].Post(engine.SendWR{ID: uint64(i), Op: engine.OpWrite, Local: engine.SGE{Region: srcReg, Offset: off, Length: each},
				RKey: dstReg.Key(), RemoteOffset: off})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(60*time.Second, func() bool { return ca.ok.Load()+ca.failed.Load() >= conns }) || ca.failed.Load() > 0 {
		var st Stats
		onLoop(loop, func() { st = b.drv.Stats() })
		t.Fatalf("%d of %d WRITEs complete, %d failed, the first with %v; receiver driver %+v", ca.ok.Load(), conns, ca.failed.Load(), ca.first.Load(), st)
	}
	moved := time.Since(start) - setup
	var st, rst Stats
	var resent uint64
	same := false
	onLoop(loop, func() {
		st, rst, same = a.drv.Stats(), b.drv.Stats(), bytes.Equal(src, dst)
		for _, c := range all {
			resent += c.SenderStats().Retransmits
		}
	})
	if !same {
		t.Fatal("data differs")
	}
	t.Logf("%d connections set up in %v, %d MiB moved in %v, %d data packets resent; sender driver %+v; receiver driver %+v",
		conns, setup.Round(time.Millisecond), conns*each>>20, moved.Round(time.Millisecond), resent, st, rst)
}
