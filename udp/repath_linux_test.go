package udp

import (
	"bytes"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/pathmgr"
)

// needRootTool skips the test unless it runs as root with tool, from Debian
// package pkg. The test uses it to change how loopback behaves for
// addresses of its own, and why says what for. With MROCE_REQUIRE_NETADMIN
// set, as in CI, it fails instead.
func needRootTool(t *testing.T, tool, pkg, why string) {
	t.Helper()
	_, err := exec.LookPath(tool)
	if os.Geteuid() == 0 && err == nil {
		return
	}
	msg := fmt.Sprintf("needs root and %s (Debian package %s) to %s", tool, pkg, why)
	if os.Getenv("MROCE_REQUIRE_NETADMIN") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// run runs a command and fails the test if it fails.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// blackhole drops, from now until the test ends, every UDP datagram that
// leaves addr from port, as if the route through that source port failed.
// The table is this test's own and is deleted however the test ends.
func blackhole(t *testing.T, addr string, port uint16) (repair func()) {
	t.Helper()
	table := fmt.Sprintf("mroce_test_%d_%d", os.Getpid(), rand.IntN(1<<30))
	nft := func(args ...string) error {
		out, err := exec.Command("nft", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nft %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := nft("add", "table", "inet", table); err != nil {
		t.Fatal(err)
	}
	done := false
	repair = func() {
		if !done {
			done = true
			if err := nft("delete", "table", "inet", table); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(repair)
	if err := nft("add", "chain", "inet", table, "out", "{ type filter hook output priority 0 ; }"); err != nil {
		t.Fatal(err)
	}
	if err := nft("add", "rule", "inet", table, "out", "ip", "saddr", addr, "udp", "sport", fmt.Sprint(port), "drop"); err != nil {
		t.Fatal(err)
	}
	return repair
}

// On real sockets, a path whose source port stops getting through times
// out. Its route failed, and every datagram from that port is dropped. The
// path is assumed bad, moves to a fresh source port of the pool, is probed
// back to good and carries data again. The connection never stops and
// every byte arrives.
func TestLargeBlackholedSourcePortIsLeft(t *testing.T) {
	needRootTool(t, "nft", "nftables", "blackhole a source port")
	loop := runningLoop(t)
	const paths = 4
	morePorts := func(c *engine.Config) { // a pool of twice the paths, with fresh ports to move to
		for i := 1; i <= paths; i++ {
			c.SourcePorts = append(c.SourcePorts, c.SourcePorts[len(c.SourcePorts)-1]+1)
		}
	}
	a := bindSideWith(t, loop, addrs([]string{"127.0.0.41"}), paths, morePorts)
	b := bindSide(t, loop, addrs([]string{"127.0.0.42"}), paths)
	defer a.drv.Close()
	defer b.drv.Close()
	a.drv.Start(a.ep)
	b.drv.Start(b.ep)

	const size = 8 << 20
	src, dst := make([]byte, size), make([]byte, size)
	crand.Read(src)
	ea := &events{}
	var conn *engine.Conn
	var srcReg, dstReg *memreg.Region
	var err error
	onLoop(loop, func() {
		b.ep.Listen(b.pd, func(*engine.Conn) (engine.Events, bool) { return &events{}, true })
		if conn, err = a.ep.Connect(b.cfg.Planes, b.cfg.Port, a.pd, ea); err != nil {
			return
		}
		if srcReg, err = a.pd.Register(src, memreg.LocalWrite); err == nil {
			dstReg, err = b.pd.Register(dst, memreg.LocalWrite|memreg.RemoteWrite)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { ea.mu.Lock(); defer ea.mu.Unlock(); return ea.state == engine.Established }) {
		t.Fatal("not established in 10 s")
	}
	// Keep two WRITEs of the whole buffer in flight until the test has seen
	// what it looks for. Each writes the same bytes to the same place.
	posted := 0
	post := func() {
		onLoop(loop, func() {
			err = conn.Post(engine.SendWR{ID: uint64(posted), Op: engine.OpWrite, Local: engine.SGE{Region: srcReg, Length: size}, RKey: dstReg.Key()})
		})
		if err != nil {
			t.Fatal(err)
		}
		posted++
	}
	completed := func() int { ea.mu.Lock(); defer ea.mu.Unlock(); return len(ea.done) }
	telemetry := func() (tel []pathmgr.Telemetry) {
		onLoop(loop, func() { tel = conn.Telemetry() })
		return tel
	}
	post()
	post()
	if !waitFor(10*time.Second, func() bool { return completed() >= 1 }) {
		t.Fatal("the first WRITE did not complete")
	}
	before := telemetry()[0]
	repair := blackhole(t, "127.0.0.41", before.SrcPort)
	var seen []string // path 0's states and ports as they change
	last := ""
	var now pathmgr.Telemetry
	deadline := time.Now().Add(30 * time.Second)
	for {
		now = telemetry()[0]
		if step := fmt.Sprintf("%v on %d", now.State, now.SrcPort); step != last {
			seen = append(seen, step)
			last = step
		}
		if now.SrcPort != before.SrcPort && now.State == pathmgr.Good && now.PacketsSent > before.PacketsSent+1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("path 0 did not move and recover in 30 s: %v; now %+v", seen, now)
		}
		if posted-completed() < 2 {
			post()
		}
		time.Sleep(200 * time.Microsecond)
	}
	repair()
	if !waitFor(30*time.Second, func() bool { return completed() == posted }) {
		t.Fatalf("%d of %d WRITEs completed", completed(), posted)
	}
	ea.mu.Lock()
	for _, wc := range ea.done {
		if wc.Status != engine.StatusOK {
			t.Errorf("completion %+v", wc)
		}
	}
	cerr := ea.err
	ea.mu.Unlock()
	if cerr != nil {
		t.Fatalf("connection error %v", cerr)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("data differs")
	}
	if now.Repaths == 0 || now.Timeouts == 0 {
		t.Errorf("path 0 %+v: want a timeout and a move", now)
	}
	// The polling above can miss a state that lasts less than a poll, so the
	// engine's own record of path 0 is checked too. The path went
	// ASSUMED_BAD, moved, and came back GOOD.
	ea.mu.Lock()
	var steps []string
	bad, moved := false, false
	for _, ev := range ea.paths {
		if ev.Path != 0 {
			continue
		}
		if ev.Repath {
			moved = true
			steps = append(steps, fmt.Sprintf("moved to %d", ev.SrcPort))
			continue
		}
		bad = bad || ev.To == pathmgr.AssumedBad
		steps = append(steps, ev.To.String())
	}
	ea.mu.Unlock()
	if !bad || !moved {
		t.Errorf("path 0's events %v: want ASSUMED_BAD and a move", steps)
	}
	t.Logf("path 0 from port %d: %s (polled: %s); %d WRITEs of %d MiB; now %+v", before.SrcPort, strings.Join(steps, " -> "),
		strings.Join(seen, " -> "), posted, size>>20, now)
}

// writeOverSmallRoute gives the loopback address peer a route that carries
// at most 1,400 bytes with DF set, connects to it from another loopback
// address with the engine's configuration adjusted by tune, and WRITEs
// 1 MiB. It returns once the WRITE completed or the connection failed.
func writeOverSmallRoute(t *testing.T, peer string, tune func(*engine.Config)) (*events, *engine.Conn, *clock.Loop, []byte, []byte) {
	needRootTool(t, "ip", "iproute2", "give a loopback address a smaller path MTU")
	run(t, "ip", "route", "add", "local", peer+"/32", "dev", "lo", "table", "local", "mtu", "lock", "1400")
	t.Cleanup(func() { run(t, "ip", "route", "del", "local", peer+"/32", "dev", "lo", "table", "local") })
	loop := runningLoop(t)
	a := bindSideWith(t, loop, addrs([]string{"127.0.0.87"}), 2, tune)
	b := bindSideWith(t, loop, addrs([]string{peer}), 2, tune)
	t.Cleanup(func() { a.drv.Close(); b.drv.Close() })
	a.drv.Start(a.ep)
	b.drv.Start(b.ep)
	ea := &events{}
	var conn *engine.Conn
	var err error
	src := make([]byte, 1<<20)
	dst := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{88}).Read(src)
	var srcReg, dstReg *memreg.Region
	onLoop(loop, func() {
		b.ep.Listen(b.pd, func(*engine.Conn) (engine.Events, bool) { return &events{}, true })
		if conn, err = a.ep.Connect(b.cfg.Planes, b.cfg.Port, a.pd, ea); err == nil {
			if srcReg, err = a.pd.Register(src, memreg.LocalWrite); err == nil {
				dstReg, err = b.pd.Register(dst, memreg.LocalWrite|memreg.RemoteWrite)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { ea.mu.Lock(); defer ea.mu.Unlock(); return ea.state == engine.Established }) {
		t.Fatal("not established (the handshake's packets fit the path)")
	}
	onLoop(loop, func() {
		err = conn.Post(engine.SendWR{ID: 1, Op: engine.OpWrite, Local: engine.SGE{Region: srcReg, Length: 1 << 20}, RKey: dstReg.Key()})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(5*time.Second, func() bool { ea.mu.Lock(); defer ea.mu.Unlock(); return ea.err != nil || len(ea.done) > 0 }) {
		t.Fatal("the WRITE neither completed nor failed in 5 s")
	}
	return ea, conn, loop, src, dst
}

// A path whose MTU is below the connection's packets fails clearly on a
// connection without RECUT. With no path MTU search, the kernel refuses
// the first data packet, and the connection fails at once with an error
// that names the path and the sizes. It does not resend into the refusal
// until its no-progress timeout.
func TestPathMTUBelowThePacketsFailsClearly(t *testing.T) {
	const peer = "127.0.0.88"
	ea, _, _, _, _ := writeOverSmallRoute(t, peer, func(c *engine.Config) { c.NoRecut = true })
	// The failure flushes the WRITE before it reports the error, and
	// writeOverSmallRoute may return between the two.
	waitFor(time.Second, func() bool { ea.mu.Lock(); defer ea.mu.Unlock(); return ea.err != nil })
	ea.mu.Lock()
	defer ea.mu.Unlock()
	var mtu *engine.PathMTUError
	if !errors.As(ea.err, &mtu) || mtu.Size <= 1400-28 || mtu.Dst.Addr().String() != peer {
		t.Fatalf("error %v: want a PathMTUError for a packet over 1,372 bytes to %s", ea.err, peer)
	}
	if len(ea.done) != 1 || ea.done[0].Status != engine.StatusFlushed {
		t.Fatalf("completions %+v: want the WRITE flushed", ea.done)
	}
	t.Log(ea.err)
}

// The same route under a connection with RECUT (spec section 6.7): the
// kernel refuses the first data packet, the plane's size is searched
// again from 1,200 bytes, the refused packet and any other cut too large
// are resent cut smaller, and the WRITE completes intact.
func TestPathMTUBelowThePacketsIsLearned(t *testing.T) {
	ea, conn, loop, src, dst := writeOverSmallRoute(t, "127.0.0.90", func(*engine.Config) {})
	ea.mu.Lock()
	if ea.err != nil || len(ea.done) != 1 || ea.done[0].Status != engine.StatusOK || !bytes.Equal(src, dst) {
		t.Fatalf("error %v, completions %+v, data equal %v", ea.err, ea.done, bytes.Equal(src, dst))
	}
	ea.mu.Unlock()
	var mtus []engine.PlaneMTU
	var stats engine.SenderStats
	if !waitFor(5*time.Second, func() bool {
		onLoop(loop, func() { mtus, stats = conn.PathMTU(), conn.SenderStats() })
		return mtus[0].Done
	}) {
		t.Fatalf("the search is not over: %+v", mtus)
	}
	if got := mtus[0].Size; got > 1372 || got < 1372-16 || stats.MTUFalls == 0 || stats.Recuts == 0 {
		t.Fatalf("learned %d bytes (want 1,372 or at most 16 less), %d falls, %d recuts", got, stats.MTUFalls, stats.Recuts)
	}
	t.Logf("learned %d bytes; %d falls, %d recuts", mtus[0].Size, stats.MTUFalls, stats.Recuts)
}

// The same route under a connection that searches its path MTU (spec
// section 6.7): it starts at 1,200 bytes, the kernel refuses its larger
// PROBEs at once, and the WRITE completes intact in packets of the most
// the route carries, 1,372 bytes, or at most the search's granularity
// less.
func TestPathMTUSearchOverAKernelRoute(t *testing.T) {
	ea, conn, loop, src, dst := writeOverSmallRoute(t, "127.0.0.89", func(c *engine.Config) {
		c.MaxPacket, c.BasePacket = 4160, BaseDatagram
	})
	ea.mu.Lock()
	if ea.err != nil || len(ea.done) != 1 || ea.done[0].Status != engine.StatusOK || !bytes.Equal(src, dst) {
		t.Fatalf("error %v, completions %+v, data equal %v", ea.err, ea.done, bytes.Equal(src, dst))
	}
	ea.mu.Unlock()
	var mtus []engine.PlaneMTU
	if !waitFor(5*time.Second, func() bool { onLoop(loop, func() { mtus = conn.PathMTU() }); return mtus[0].Done }) {
		t.Fatalf("the search is not over: %+v", mtus)
	}
	if got := mtus[0].Size; got > 1372 || got < 1372-16 {
		t.Fatalf("learned %d bytes, want 1,372 or at most 16 less", got)
	}
	t.Logf("learned %d bytes", mtus[0].Size)
}
