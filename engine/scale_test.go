package engine

import (
	"crypto/sha256"
	"hash"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// scaleConn is one connection of the scale test. It holds the connection's
// sender side and receiver side, and the running hash of what arrived.
type scaleConn struct {
	progress *scaleProgress
	a, b     *Conn
	src      *memreg.Region
	srcOff   int
	recvd    int
	bufs     [scaleDepth]*memreg.Region
	posted   int // SENDs posted
	got      hash.Hash
	failed   bool
	sendDone int
}

// scaleEvents feeds a connection's completions back into the test. Each
// receive completion hashes its buffer and posts it again.
type scaleEvents struct {
	sc   *scaleConn
	recv bool
}

// scaleProgress counts, across every connection, what the run waits for,
// so the loop's condition costs nothing per event.
type scaleProgress struct {
	established, finished, failed int
}

func (e *scaleEvents) State(_ *Conn, s ConnState, err error) {
	switch {
	case s == Established && !e.recv:
		e.sc.progress.established++
	case s == Closed && err != nil:
		e.sc.failed = true
		e.sc.progress.failed++
	}
}

func (e *scaleEvents) Completion(c *Conn, wc Completion) {
	sc := e.sc
	if wc.Status != StatusOK {
		sc.failed = true
		return
	}
	if !e.recv {
		sc.sendDone++
		if sc.posted < scaleMessages { // keep scaleDepth SENDs outstanding
			sc.post(c)
		}
		if sc.sendDone == scaleMessages && sc.recvd == scaleMessages {
			sc.progress.finished++
		}
		return
	}
	buf := sc.bufs[wc.ID]
	sc.got.Write(buf.Bytes()[:wc.Bytes])
	sc.recvd++
	if sc.sendDone == scaleMessages && sc.recvd == scaleMessages {
		sc.progress.finished++
	}
	if sc.recvd+scaleDepth <= scaleMessages { // keep scaleDepth receives posted
		c.PostRecv(RecvWR{ID: wc.ID, Local: SGE{buf, 0, scaleChunk}})
	}
}

func (sc *scaleConn) post(c *Conn) {
	c.Post(SendWR{ID: uint64(sc.posted), Op: OpSend, Local: SGE{sc.src, uint64(sc.srcOff + sc.posted*scaleChunk), scaleChunk}})
	sc.posted++
}

const (
	scaleHosts    = 64
	scaleConns    = 4000
	scaleChunk    = 16 << 10
	scaleMessages = 64 // 64 x 16 KiB = 1 MiB per connection
	scaleDepth    = 4  // SENDs outstanding and receives posted per connection
)

// TestLargeScale4000Connections runs 4,000 connections between 64 hosts in
// one process, all moving data at once. Every connection SENDs 1 MiB,
// verified by SHA-256 as it arrives. It reports the memory per connection
// and the end-to-end speed.
func TestLargeScale4000Connections(t *testing.T) {
	if testing.Short() {
		t.Skip("4,000 connections: run without -short")
	}
	l := netem.LinkConfig{Rate: 100e9, Delay: time.Microsecond, Queue: netem.QueueConfig{Limit: 4 << 20}}
	fc := netem.Config{Seed: 5, Hosts: scaleHosts, Planes: 4, HostsPerLeaf: 8, Spines: 4,
		Uplink: l, Downlink: l, FabricUp: l, FabricDown: l, MaxDatagram: 4160}
	// A small window per path keeps the 60 or so senders into one host from
	// overflowing its downlinks.
	ec := Config{Paths: 4, Streams: 1, DSNWindow: 256, PathWindow: 4, NoProgress: time.Second}
	n := newNet(t, fc, ec)

	// Each host's source data is 4 MiB of its own random bytes.
	srcs := make([]*memreg.Region, scaleHosts)
	for h := range srcs {
		srcs[h] = n.hosts[h].region(t, 4<<20, uint64(h+1), memreg.LocalWrite)
	}
	conns := make([]*scaleConn, scaleConns)
	progress := &scaleProgress{}
	pending := map[uint32]*scaleConn{} // acceptor side, by the initiator's id
	for h := range n.hosts {
		n.hosts[h].ep.Listen(n.hosts[h].pd, func(c *Conn) (Events, bool) {
			sc := pending[c.PeerID()]
			return &scaleEvents{sc: sc, recv: true}, sc != nil
		})
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range conns {
		a := i % scaleHosts
		b := (a + 1 + rng.IntN(scaleHosts-1)) % scaleHosts
		sc := &scaleConn{progress: progress, src: srcs[a], srcOff: rng.IntN(3 << 20), got: sha256.New()}
		var remote []netip.Addr
		for p := 0; p < fc.Planes; p++ {
			remote = append(remote, netem.Addr(p, b))
		}
		c, err := n.hosts[a].ep.Connect(remote, proto.DefaultPort, n.hosts[a].pd, &scaleEvents{sc: sc})
		if err != nil {
			t.Fatal(err)
		}
		sc.a = c
		pending[c.ID()] = sc
		conns[i] = sc
	}
	// Run the handshakes, then find the acceptor side of each connection.
	n.run(time.Second, func() bool { return progress.established == scaleConns })
	for h := range n.hosts {
		for _, c := range n.hosts[h].ep.conns {
			if !c.initiator {
				pending[c.PeerID()].b = c
			}
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perConn := float64(after.HeapAlloc-before.HeapAlloc) / scaleConns
	for i, sc := range conns {
		if sc.a.State() != Established || sc.b == nil {
			t.Fatalf("connection %d not established: %v", i, sc.a.State())
		}
		for k := range sc.bufs {
			sc.bufs[k] = n.hosts[sc.b.ep.cfg.Planes[0].As4()[3]].region(t, scaleChunk, 0, memreg.LocalWrite)
			sc.b.PostRecv(RecvWR{ID: uint64(k), Local: SGE{sc.bufs[k], 0, scaleChunk}})
		}
	}
	wall := time.Now()
	start := n.sim.Now()
	for _, sc := range conns {
		for m := 0; m < scaleDepth; m++ {
			sc.post(sc.a)
		}
	}
	var packets uint64
	ok := n.run(10*time.Second, func() bool { return progress.failed > 0 || progress.finished == scaleConns })
	elapsedWall := time.Since(wall)
	for i, sc := range conns {
		if !ok || sc.failed || sc.recvd != scaleMessages {
			t.Fatalf("connection %d: %d of %d messages, failed %v (%v)", i, sc.recvd, scaleMessages, sc.failed, sc.a.Err())
		}
		want := sha256.Sum256(sc.src.Bytes()[sc.srcOff : sc.srcOff+scaleMessages*scaleChunk])
		if got := sc.got.Sum(nil); string(got) != string(want[:]) {
			t.Fatalf("connection %d: the data received differs", i)
		}
		packets += sc.a.SenderStats().Packets
	}
	t.Logf("%d connections on %d hosts moved %d MiB in %v of virtual time, %v of wall time: %.0f data packets/s end to end (engine + fabric)",
		scaleConns, scaleHosts, scaleConns*scaleMessages*scaleChunk>>20, n.sim.Now().Sub(start), elapsedWall.Round(time.Millisecond),
		float64(packets)/elapsedWall.Seconds())
	t.Logf("memory per connection (both ends, %d paths, DSN window %d): %.1f KiB; per path %.1f KiB",
		ec.Paths, ec.DSNWindow, perConn/1024, perConn/float64(2*ec.Paths)/1024)
}
