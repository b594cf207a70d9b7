package udp

import (
	"bytes"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/pathmgr"
)

// needNft skips the test unless it runs as root with nft (Debian package
// nftables), which it uses to drop a source port's packets on loopback.
// With MROCE_REQUIRE_NFT set (CI), it fails instead.
func needNft(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("nft")
	if os.Geteuid() == 0 && err == nil {
		return
	}
	msg := "needs root and nft (Debian package nftables) to blackhole a source port"
	if os.Getenv("MROCE_REQUIRE_NFT") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// blackhole drops, from now until the test ends, every UDP datagram that
// leaves addr from port: the route through that source port has failed.
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

// On real sockets, a path whose source port stops getting through (its
// route failed: every datagram from that port is dropped) times out, is
// assumed bad, moves to a fresh source port of the pool, is probed back
// to good and carries data again; the connection never stops and every
// byte arrives.
func TestLargeBlackholedSourcePortIsLeft(t *testing.T) {
	needNft(t)
	loop := runningLoop(t)
	const paths = 4
	morePorts := func(c *engine.Config) { // a pool of twice the paths: fresh ports to move to
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
	// Keep two WRITEs of the whole buffer in flight until the test has
	// seen what it looks for (each writes the same bytes to the same place).
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
	bad := false
	for _, s := range seen {
		bad = bad || strings.HasPrefix(s, pathmgr.AssumedBad.String())
	}
	if !bad {
		t.Errorf("path 0 never showed ASSUMED_BAD: %v", seen)
	}
	t.Logf("path 0 from port %d: %s; %d WRITEs of %d MiB; now %+v", before.SrcPort, strings.Join(seen, " -> "), posted, size>>20, now)
}
