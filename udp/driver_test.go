package udp

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/memreg"
)

// side is one endpoint on real sockets.
type side struct {
	ep  *engine.Endpoint
	drv *Driver
	pd  *memreg.Domain
	cfg engine.Config
}

// bindSide binds an endpoint's sockets on planes, retrying with other
// ports if some are taken.
func bindSide(t *testing.T, loop *clock.Loop, planes []netip.Addr, paths int) *side {
	t.Helper()
	return bindSideWith(t, loop, planes, paths, func(*engine.Config) {})
}

// bindSideWith is bindSide with the engine's configuration adjusted by tune.
func bindSideWith(t *testing.T, loop *clock.Loop, planes []netip.Addr, paths int, tune func(*engine.Config)) *side {
	t.Helper()
	var lastErr error
	for try := 0; try < 20; try++ {
		base := uint16(20000 + rand.IntN(40000))
		cfg := engine.Config{Planes: planes, Port: base, Paths: paths, Streams: 2, NoProgress: 10 * time.Second,
			RTOMin: RTOMin, ProbeMin: RTOMin, RTOInitial: RTOInitial}
		for i := 1; i <= paths; i++ {
			cfg.SourcePorts = append(cfg.SourcePorts, base+uint16(i))
		}
		tune(&cfg)
		drv, err := New(Config{Planes: planes, Port: cfg.Port, SourcePorts: cfg.SourcePorts}, loop)
		if err != nil {
			lastErr = err
			continue
		}
		ep, err := engine.NewEndpoint(cfg, loop, drv)
		if err != nil {
			t.Fatal(err)
		}
		return &side{ep: ep, drv: drv, pd: memreg.NewRegistry(crand.Reader).NewDomain(), cfg: ep.Config()}
	}
	t.Fatalf("no free ports: %v", lastErr)
	return nil
}

// onLoop runs f on the loop goroutine and waits for it.
func onLoop(loop *clock.Loop, f func()) {
	done := make(chan struct{})
	loop.Post(func() { f(); close(done) })
	<-done
}

type events struct {
	mu    sync.Mutex
	done  []engine.Completion
	state engine.ConnState
	err   error
	paths []engine.PathEvent // every path state change and move, as the engine reports them
}

func (e *events) PathChanged(_ *engine.Conn, ev engine.PathEvent) {
	e.mu.Lock()
	e.paths = append(e.paths, ev)
	e.mu.Unlock()
}

func (e *events) Completion(_ *engine.Conn, wc engine.Completion) {
	e.mu.Lock()
	e.done = append(e.done, wc)
	e.mu.Unlock()
}

func (e *events) State(_ *engine.Conn, s engine.ConnState, err error) {
	e.mu.Lock()
	e.state, e.err = s, err
	e.mu.Unlock()
}

// counting wraps a receiver and counts, per source port, the data packets
// that arrive and those marked ECT(0).
type counting struct {
	next    link.Receiver
	mu      sync.Mutex
	perPort map[uint16]int
	ect0    int
	data    int
}

func (c *counting) Receive(d *link.Datagram, at clock.Time) {
	if len(d.Data) > 1 && d.Data[1] < 0x10 { // data types are 0x01..0x0F, per section 3 of the spec
		c.mu.Lock()
		c.perPort[d.Src.Port()]++
		c.data++
		if d.ECN == link.ECT0 {
			c.ect0++
		}
		c.mu.Unlock()
	}
	c.next.Receive(d, at)
}

// A WRITE of 32 MiB goes over real loopback sockets, on 8 paths over 2
// planes. The bytes arrive intact, every source port carries data, and the
// receiver reads the ECN field the sender set, ECT(0) on data.
func TestLoopbackTransfer(t *testing.T) {
	transfer(t, []string{"127.0.0.1", "127.0.0.2"}, []string{"127.0.0.3", "127.0.0.4"}, 8, 32<<20)
}

// The same holds over IPv6 loopback, with one plane, since ::1 is the only
// address, and 4 paths. The traffic class carries ECN.
func TestLoopbackTransferIPv6(t *testing.T) {
	probe, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	probe.Close()
	transfer(t, []string{"::1"}, []string{"::1"}, 4, 8<<20)
}

func addrs(ss []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// transfer WRITEs size bytes from an endpoint on planesA to one on planesB
// over paths paths and checks what the test comments say.
func transfer(t *testing.T, planesA, planesB []string, paths, size int) {
	loop := runningLoop(t)

	a := bindSide(t, loop, addrs(planesA), paths)
	b := bindSide(t, loop, addrs(planesB), paths)
	defer a.drv.Close()
	defer b.drv.Close()
	a.drv.Start(a.ep)
	rx := &counting{next: b.ep, perPort: map[uint16]int{}}
	b.drv.Start(rx)

	src := make([]byte, size)
	crand.Read(src)
	dst := make([]byte, size)
	ea, eb := &events{}, &events{}
	var conn *engine.Conn
	var err error
	onLoop(loop, func() {
		b.ep.Listen(b.pd, func(*engine.Conn) (engine.Events, bool) { return eb, true })
		conn, err = a.ep.Connect(b.cfg.Planes, b.cfg.Port, a.pd, ea)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool {
		ea.mu.Lock()
		defer ea.mu.Unlock()
		return ea.state == engine.Established || ea.err != nil
	}) {
		t.Fatal("not established in 10 s")
	}
	var srcReg, dstReg *memreg.Region
	onLoop(loop, func() {
		srcReg, err = a.pd.Register(src, memreg.LocalWrite)
		if err == nil {
			dstReg, err = b.pd.Register(dst, memreg.LocalWrite|memreg.RemoteWrite)
		}
		if err == nil {
			err = conn.Post(engine.SendWR{ID: 1, Op: engine.OpWrite, Local: engine.SGE{Region: srcReg, Length: uint32(size)}, RKey: dstReg.Key()})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if !waitFor(60*time.Second, func() bool {
		ea.mu.Lock()
		defer ea.mu.Unlock()
		return len(ea.done) > 0 || ea.err != nil
	}) {
		t.Fatal("no completion in 60 s")
	}
	ea.mu.Lock()
	wc, cerr := ea.done, ea.err
	ea.mu.Unlock()
	if cerr != nil || len(wc) != 1 || wc[0].Status != engine.StatusOK {
		var sa, sb Stats
		onLoop(loop, func() { sa, sb = a.drv.Stats(), b.drv.Stats() })
		rx.mu.Lock()
		t.Logf("sender driver %+v, receiver driver %+v, data packets in %d", sa, sb, rx.data)
		rx.mu.Unlock()
		t.Fatalf("completion %+v, error %v", wc, cerr)
	}
	var st SenderCheck
	onLoop(loop, func() {
		st.stats = a.drv.Stats()
		st.paths = conn.Paths()
	})
	if !bytes.Equal(src, dst) {
		t.Fatal("data differs")
	}
	rx.mu.Lock()
	defer rx.mu.Unlock()
	for _, port := range a.cfg.SourcePorts {
		if rx.perPort[port] == 0 {
			t.Errorf("source port %d carried no data (per port: %v)", port, rx.perPort)
		}
	}
	if rx.ect0 != rx.data {
		t.Errorf("%d of %d data packets arrived ECT(0)", rx.ect0, rx.data)
	}
	took := time.Since(began)
	t.Logf("%d MiB over %d paths in %v (%.2f Gb/s, polled every 5 ms): %d data packets for %d, per source port %v; driver %+v",
		size>>20, st.paths, took.Round(time.Millisecond), float64(size)*8/took.Seconds()/1e9, rx.data, size/4096, rx.perPort, st.stats)
}

// SenderCheck is what the test reads from the loop after the transfer.
type SenderCheck struct {
	stats Stats
	paths int
}

// waitFor polls cond until it holds or d of wall time passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// Sending allocates nothing once the driver's buffers are warm.
func TestSendDoesNotAllocate(t *testing.T) {
	s, peer := senderAndPeer(t)
	dst := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.cfg.SourcePorts[0])
	batch := make([]link.Datagram, 16)
	calls := 0
	send := func() {
		calls++
		for i := range batch {
			batch[i] = link.Datagram{Src: src, Dst: dst, ECN: link.ECT0, DSCP: 26, Data: append(s.drv.Buffer(), make([]byte, 1000)[:1000]...)}
		}
		s.drv.Send(batch)
		s.drv.Flush()
	}
	go func() { // drain the peer so its buffer never fills
		buf := make([]byte, 2000)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
		}
	}()
	send()
	if n := testing.AllocsPerRun(50, send); n != 0 && !raceEnabled {
		t.Errorf("%.1f allocations per batch of %d", n, len(batch))
	}
	if st := s.drv.Stats(); st.SendErrors != 0 || st.Sent != uint64(calls*len(batch)) {
		t.Errorf("stats %+v", st)
	}
}

// A receive buffer that overflows is counted. The kernel's drop count comes
// with the next datagram it queues.
func TestKernelDropsAreCounted(t *testing.T) {
	loop := runningLoop(t)
	drv := newDriver(t, loop, Config{Planes: addrs([]string{"127.0.0.6"}), SocketBuffer: 1})
	to := net.UDPAddrFromAddrPort(drv.LocalPorts()[0])
	from, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 7)})
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	payload := make([]byte, 1200)
	for i := 0; i < 500; i++ { // nobody reads yet, so the smallest buffer overflows
		from.WriteToUDP(payload, to)
	}
	var mu sync.Mutex
	got := 0
	drv.Start(link.ReceiverFunc(func(*link.Datagram, clock.Time) { mu.Lock(); got++; mu.Unlock() }))
	if !waitFor(5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return got > 0 }) {
		t.Fatal("nothing received")
	}
	from.WriteToUDP(payload, to) // carries the count
	var st Stats
	if !waitFor(5*time.Second, func() bool {
		onLoop(loop, func() { st = drv.Stats() })
		return st.KernelDrops > 0 && st.Received+st.KernelDrops == 501
	}) {
		t.Fatalf("stats %+v: want received + kernel drops = 501", st)
	}
	t.Logf("%+v", st)
}

// A batch whose datagrams alternate between two sources, on two paths, goes
// out in one system call per source, each source's datagrams in order.
func TestSendGroupsBySource(t *testing.T) {
	s, peer := senderAndPeer(t)
	dst := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	var batch []link.Datagram
	for i := 0; i < 16; i++ {
		src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.cfg.SourcePorts[i%2])
		batch = append(batch, link.Datagram{Src: src, Dst: dst, Data: append(s.drv.Buffer(), byte(i))})
	}
	s.drv.Send(batch)
	s.drv.Flush()
	if st := s.drv.Stats(); st.Sent != 16 || st.SendCalls != 2 {
		t.Fatalf("stats %+v: want 16 datagrams in 2 calls", st)
	}
	last := map[uint16]int{}
	buf := make([]byte, 16)
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	for k := 0; k < 16; k++ {
		n, from, err := peer.ReadFromUDPAddrPort(buf)
		if err != nil || n != 1 {
			t.Fatalf("read %d: %v", k, err)
		}
		i := int(buf[0])
		if prev, ok := last[from.Port()]; ok && i <= prev {
			t.Fatalf("from port %d: %d after %d", from.Port(), i, prev)
		}
		if want := s.cfg.SourcePorts[i%2]; from.Port() != want {
			t.Fatalf("datagram %d from port %d, want %d", i, from.Port(), want)
		}
		last[from.Port()] = i
	}
}

// senderAndPeer binds a driver on 127.0.0.1 with two source ports, not
// started, since only its sending is used. It also binds a plain socket on
// 127.0.0.5 to send to. Both close when the test ends.
func senderAndPeer(t *testing.T) (*side, *net.UDPConn) {
	t.Helper()
	s := bindSide(t, clock.NewLoop(), []netip.Addr{netip.MustParseAddr("127.0.0.1")}, 2)
	t.Cleanup(func() { s.drv.Close() })
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 5)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	return s, peer
}

// New fits the largest datagram to the planes' interface MTU by default,
// and refuses a MaxDatagram that would not fit.
func TestMaxDatagramFitsTheMTU(t *testing.T) {
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	port := uint16(20000 + rand.IntN(40000))
	if _, err := New(Config{Planes: lo, Port: port, MaxDatagram: 70000}, clock.NewLoop()); err == nil || !strings.Contains(err.Error(), "MTU") {
		t.Errorf("MaxDatagram 70000 on loopback: %v, want an MTU error", err)
	}
	d, err := New(Config{Planes: lo, Port: port}, clock.NewLoop())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	mtu, _, err := InterfaceMTU(lo[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := min(9000, mtu-28); d.MaxDatagram() != want {
		t.Errorf("default MaxDatagram %d, want %d (MTU %d)", d.MaxDatagram(), want, mtu)
	}
	if _, err := New(Config{Planes: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Port: port}, clock.NewLoop()); err == nil || !strings.Contains(err.Error(), "no local interface") {
		t.Errorf("a plane no interface holds: %v", err)
	}
}

// tooBigRecorder is a receiver that wants to hear of datagrams refused as
// too big.
type tooBigRecorder struct {
	link.ReceiverFunc
	refused []link.Datagram
}

func (r *tooBigRecorder) TooBig(d *link.Datagram) { r.refused = append(r.refused, *d) }

// A datagram the kernel refuses as too big is counted and dropped, and the
// receiver is told of it once the flush is over. The rest of the batch
// still goes.
func TestTooBigIsCountedAndDropped(t *testing.T) {
	s, peer := senderAndPeer(t)
	rec := &tooBigRecorder{}
	s.drv.tooBig = rec // as Start would
	dst := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.cfg.SourcePorts[0])
	s.drv.Send([]link.Datagram{
		{Src: src, Dst: dst, Data: append(s.drv.Buffer(), 1)},
		{Src: src, Dst: dst, Data: make([]byte, 70000)}, // no UDP datagram is this big
		{Src: src, Dst: dst, Data: append(s.drv.Buffer(), 3)},
	})
	s.drv.Flush()
	if st := s.drv.Stats(); st.TooBig != 1 || st.Sent != 2 || st.SendErrors != 0 {
		t.Fatalf("stats %+v: want 1 too big, 2 sent", st)
	}
	if len(rec.refused) != 1 || rec.refused[0].Src != src || rec.refused[0].Dst != dst || len(rec.refused[0].Data) != 70000 {
		t.Fatalf("told of %d refused datagrams, want the 70,000-byte one from %v to %v", len(rec.refused), src, dst)
	}
}

// With GSO, datagrams of one size from one source to one destination go as
// one message that the kernel cuts apart. A shorter one may end the run,
// and the receiver gets each datagram whole and in order.
func TestGSOSendsRunsAsOneMessage(t *testing.T) {
	s, peer := senderAndPeer(t)
	if !s.drv.gso {
		t.Skip("the kernel has no UDP_SEGMENT")
	}
	dst := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.cfg.SourcePorts[0])
	sizes := []int{4000, 4000, 4000, 100, 4000, 4000}
	var batch []link.Datagram
	for i, n := range sizes {
		b := append(s.drv.Buffer(), make([]byte, n)...)
		b[0] = byte(i)
		batch = append(batch, link.Datagram{Src: src, Dst: dst, ECN: link.ECT0, Data: b})
	}
	s.drv.Send(batch)
	s.drv.Flush()
	if st := s.drv.Stats(); st.Sent != 6 || st.Segmented != 6 || st.SendCalls != 1 {
		t.Fatalf("stats %+v: want 6 datagrams in 2 GSO messages, one call", st)
	}
	buf := make([]byte, 9000)
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i, n := range sizes {
		got, err := peer.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if got != n || buf[0] != byte(i) {
			t.Fatalf("datagram %d: %d bytes starting %d, want %d bytes starting %d", i, got, buf[0], n, i)
		}
	}
}

// refusingConn is a socket that refuses every GSO message, as a kernel or
// device without segmentation would, and records what it sends.
type refusingConn struct {
	batchConn
	sizes []int
}

func (c *refusingConn) WriteBatch(ms []ipv4.Message, flags int) (int, error) {
	if len(ms[0].Buffers) > 1 {
		return 0, syscall.EIO
	}
	for _, m := range ms {
		if len(m.Buffers) > 1 {
			break
		}
		c.sizes = append(c.sizes, len(m.Buffers[0]))
	}
	n := 0
	for n < len(ms) && len(ms[n].Buffers) == 1 {
		n++
	}
	return n, nil
}

// A GSO message the kernel refuses turns GSO off, and its datagrams go one
// by one. Nothing is lost.
func TestGSORefusedFallsBackToSingleDatagrams(t *testing.T) {
	s, peer := senderAndPeer(t)
	dst := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.cfg.SourcePorts[0])
	sock := s.drv.socks[src]
	fake := &refusingConn{batchConn: sock.batch}
	sock.batch = fake
	s.drv.gso = true
	var batch []link.Datagram
	for range 4 {
		batch = append(batch, link.Datagram{Src: src, Dst: dst, Data: append(s.drv.Buffer(), make([]byte, 1000)...)})
	}
	s.drv.Send(batch)
	s.drv.Flush()
	st := s.drv.Stats()
	if st.GSOFallbacks != 1 || st.Sent != 4 || s.drv.gso || len(fake.sizes) != 4 {
		t.Fatalf("stats %+v, GSO still on %v, sent singly %v", st, s.drv.gso, fake.sizes)
	}
}

// A destination the socket cannot reach, of the other IP family or none, is
// counted and dropped, and the rest of the batch goes.
func TestWrongFamilyIsDropped(t *testing.T) {
	s, peer := senderAndPeer(t)
	dst := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.cfg.SourcePorts[0])
	s.drv.Send([]link.Datagram{
		{Src: src, Dst: netip.MustParseAddrPort("[::1]:4797"), Data: append(s.drv.Buffer(), 1)},
		{Src: src, Dst: netip.AddrPort{}, Data: append(s.drv.Buffer(), 2)},
		{Src: src, Dst: dst, Data: append(s.drv.Buffer(), 3)},
	})
	s.drv.Flush()
	if st := s.drv.Stats(); st.SendErrors != 2 || st.Sent != 1 {
		t.Fatalf("stats %+v: want 2 send errors, 1 sent", st)
	}
}

// A padded datagram, a simulation's placeholder, has bytes a socket cannot
// send. It is dropped and counted, and the others of the batch are sent.
func TestPaddedDatagramIsDropped(t *testing.T) {
	s, peer := senderAndPeer(t)
	dst := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.cfg.SourcePorts[0])
	s.drv.Send([]link.Datagram{
		{Src: src, Dst: dst, Data: append(s.drv.Buffer(), 1), Pad: 1000},
		{Src: src, Dst: dst, Data: append(s.drv.Buffer(), 2)},
	})
	s.drv.Flush()
	if st := s.drv.Stats(); st.Padded != 1 || st.Sent != 1 {
		t.Fatalf("stats %+v: want 1 padded, 1 sent", st)
	}
}

// A GSO message refused along with each of its datagrams alone is not the
// kernel failing to segment. GSO stays on and the datagrams are counted.
func TestGSOStaysOnWhenSinglesFailToo(t *testing.T) {
	s, peer := senderAndPeer(t)
	dst := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.cfg.SourcePorts[0])
	s.drv.socks[src].batch = failingConn{}
	s.drv.gso = true
	var batch []link.Datagram
	for range 3 {
		batch = append(batch, link.Datagram{Src: src, Dst: dst, Data: append(s.drv.Buffer(), make([]byte, 100)...)})
	}
	s.drv.Send(batch)
	s.drv.Flush()
	if st := s.drv.Stats(); !s.drv.gso || st.GSOFallbacks != 0 || st.SendErrors != 3 || st.Sent != 0 {
		t.Fatalf("stats %+v, GSO on %v: want it on and 3 send errors", st, s.drv.gso)
	}
}

type failingConn struct{ batchConn }

func (failingConn) WriteBatch([]ipv4.Message, int) (int, error) { return 0, syscall.ENETUNREACH }

// A datagram longer than MaxDatagram arrives cut. It is counted and dropped,
// never handed to the engine.
func TestTruncatedDatagramIsDropped(t *testing.T) {
	loop := runningLoop(t)
	drv := newDriver(t, loop, Config{Planes: addrs([]string{"127.0.0.6"}), MaxDatagram: 1000})
	checkLongDropped(t, loop, drv, "127.0.0.7", drv.LocalPorts()[0], 1500, 500)
}

// checkLongDropped sends a long datagram, then a short one, from fromIP to
// the driver's socket at to. Only the short one is delivered, and the long
// one is counted as truncated.
func checkLongDropped(t *testing.T, loop *clock.Loop, drv *Driver, fromIP string, to netip.AddrPort, long, short int) {
	t.Helper()
	var mu sync.Mutex
	var sizes []int
	drv.Start(link.ReceiverFunc(func(d *link.Datagram, _ clock.Time) { mu.Lock(); sizes = append(sizes, len(d.Data)); mu.Unlock() }))
	from, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(fromIP), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	from.WriteToUDPAddrPort(make([]byte, long), to)
	from.WriteToUDPAddrPort(make([]byte, short), to)
	if !waitFor(5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(sizes) > 0 }) {
		t.Fatal("nothing delivered")
	}
	var st Stats
	onLoop(loop, func() { st = drv.Stats() })
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 1 || sizes[0] != short || st.Truncated != 1 {
		t.Fatalf("delivered %v, stats %+v: want only the %d-byte one, and the %d-byte one counted as truncated", sizes, st, short, long)
	}
}

func TestConfigAndClose(t *testing.T) {
	if _, err := New(Config{Planes: addrs([]string{"::ffff:127.0.0.1"}), Port: 4797}, clock.NewLoop()); err == nil || !strings.Contains(err.Error(), "v4-mapped") {
		t.Errorf("a v4-mapped plane: %v", err)
	}
	s, _ := senderAndPeer(t)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); s.drv.Close() }()
	}
	wg.Wait()
}

// runningLoop returns a loop running until the test ends.
func runningLoop(t *testing.T) *clock.Loop {
	loop := clock.NewLoop()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go loop.Run(ctx)
	return loop
}

// newDriver binds a driver of cfg on a free receive port, which it chooses
// for cfg.Port. The driver is closed when the test ends.
func newDriver(t *testing.T, loop *clock.Loop, cfg Config) *Driver {
	t.Helper()
	var err error
	for try := 0; try < 20; try++ {
		cfg.Port = uint16(20000 + rand.IntN(40000))
		var d *Driver
		if d, err = New(cfg, loop); err == nil {
			t.Cleanup(func() { d.Close() })
			return d
		}
	}
	t.Fatal(err)
	return nil
}

// What the engine sends during one turn of the loop goes out together at
// the turn's end. Two Sends of one turn take one system call. A backlog of
// four batches goes at once, without waiting for the turn to end.
func TestSendsOfOneTurnGoTogether(t *testing.T) {
	loop := runningLoop(t)
	drv := newDriver(t, loop, Config{Planes: addrs([]string{"127.0.0.11"}), Batch: 8})
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 12)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	dst := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	src := drv.LocalPorts()[0]
	one := func(n int) []link.Datagram {
		var b []link.Datagram
		for range n {
			b = append(b, link.Datagram{Src: src, Dst: dst, Data: append(drv.Buffer(), make([]byte, 100)...)})
		}
		return b
	}
	var before, after, late Stats
	onLoop(loop, func() {
		drv.Send(one(1))
		drv.Send(one(1))
		before = drv.Stats()
	})
	onLoop(loop, func() { after = drv.Stats() })
	if before.Sent != 0 || after.Sent != 2 || after.SendCalls != 1 {
		t.Fatalf("during the turn %+v, after it %+v: want nothing, then 2 datagrams in one call", before, after)
	}
	onLoop(loop, func() {
		drv.Send(one(32)) // 4 × Batch
		late = drv.Stats()
	})
	if late.Sent != 34 {
		t.Fatalf("after a backlog of 32: %+v, want them sent at once", late)
	}
}

// A source-port socket takes the small datagrams that come back to it, a
// PROBE_REPLY or a CLOSE. Its buffers are small, so it counts and drops
// anything longer than a few hundred bytes.
func TestSourcePortsReadSmallDatagrams(t *testing.T) {
	loop := runningLoop(t)
	drv := newDriver(t, loop, Config{Planes: addrs([]string{"127.0.0.13"}), SourcePorts: []uint16{0}})
	var sport netip.AddrPort
	for ap, sock := range drv.socks {
		if ap.Port() != drv.cfg.Port {
			sport = sock.conn.LocalAddr().(*net.UDPAddr).AddrPort() // port 0 was asked, so this is the one the system gave
		}
	}
	checkLongDropped(t, loop, drv, "127.0.0.14", sport, 2000, 44)
}
