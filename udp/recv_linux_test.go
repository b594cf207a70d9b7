package udp

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// gsoToDriver sends sizes as one GSO run from a driver's source port to a
// second driver, with GRO unless noGRO. It returns what the second
// delivered, in order, and its counters.
func gsoToDriver(t *testing.T, sizes []int, noGRO bool) ([]link.Datagram, Stats, netip.AddrPort) {
	t.Helper()
	s, _ := senderAndPeer(t)
	if !s.drv.gso {
		t.Skip("the kernel has no UDP_SEGMENT")
	}
	loop := runningLoop(t)
	rx := newDriver(t, loop, Config{Planes: addrs([]string{"127.0.0.8"}), NoGRO: noGRO})
	if !noGRO && !rx.recvs[0].gro {
		t.Skip("the kernel has no UDP_GRO")
	}
	var mu sync.Mutex
	var got []link.Datagram
	rx.Start(link.ReceiverFunc(func(d *link.Datagram, _ clock.Time) {
		mu.Lock()
		c := *d
		c.Data = append([]byte(nil), d.Data...)
		got = append(got, c)
		mu.Unlock()
	}))
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.cfg.SourcePorts[0])
	var batch []link.Datagram
	for i, n := range sizes {
		b := append(s.drv.Buffer(), bytes.Repeat([]byte{byte(i)}, n)...)
		batch = append(batch, link.Datagram{Src: src, Dst: rx.LocalPorts()[0], ECN: link.ECT0, DSCP: 26, Data: b})
	}
	s.drv.Send(batch)
	s.drv.Flush()
	if st := s.drv.Stats(); st.Segmented != uint64(len(sizes)) {
		t.Fatalf("sender %+v: want one GSO message", st)
	}
	if !waitFor(5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= len(sizes) }) {
		t.Fatalf("delivered %d of %d", len(got), len(sizes))
	}
	var st Stats
	onLoop(loop, func() { st = rx.Stats() })
	mu.Lock()
	defer mu.Unlock()
	return got, st, src
}

// A GSO run arrives at a GRO socket as one message, since on loopback the
// kernel keeps it whole. It is handed to the engine as the datagrams it
// was, each whole, in order, from its source, with its ECN and DSCP.
func TestGRODeliversEachDatagram(t *testing.T) {
	sizes := []int{3000, 3000, 3000, 3000, 1200}
	got, st, src := gsoToDriver(t, sizes, false)
	checkDelivered(t, got, sizes, src)
	if st.Received != uint64(len(sizes)) || st.Coalesced != uint64(len(sizes)) || st.ECNSeen != uint64(len(sizes)) {
		t.Errorf("receiver %+v: want all %d received, coalesced and with their ECN", st, len(sizes))
	}
}

// Without GRO the kernel cuts the run apart before the socket. The same
// datagrams arrive, none joined.
func TestNoGRODeliversEachDatagram(t *testing.T) {
	sizes := []int{3000, 3000, 3000, 1200}
	got, st, src := gsoToDriver(t, sizes, true)
	checkDelivered(t, got, sizes, src)
	if st.Received != uint64(len(sizes)) || st.Coalesced != 0 {
		t.Errorf("receiver %+v: want %d received, none coalesced", st, len(sizes))
	}
}

func checkDelivered(t *testing.T, got []link.Datagram, sizes []int, src netip.AddrPort) {
	t.Helper()
	if len(got) != len(sizes) {
		t.Fatalf("delivered %d datagrams, want %d", len(got), len(sizes))
	}
	for i, d := range got {
		if len(d.Data) != sizes[i] || !bytes.Equal(d.Data, bytes.Repeat([]byte{byte(i)}, sizes[i])) {
			t.Errorf("datagram %d: %d bytes, want %d of %d", i, len(d.Data), sizes[i], i)
		}
		if d.Src != src || d.ECN != link.ECT0 || d.DSCP != 26 {
			t.Errorf("datagram %d: from %v, ECN %v, DSCP %d; want %v, ECT(0), 26", i, d.Src, d.ECN, d.DSCP, src)
		}
	}
}

// Reading and delivering a batch allocates nothing. The system call writes
// into the batch's own buffers, and the source address is decoded in
// place.
func TestReceiveDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	drv := newDriver(t, clock.NewLoop(), Config{Planes: addrs([]string{"127.0.0.9"})})
	const runs, per = 40, 8
	from, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 10)})
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	to := drv.LocalPorts()[0]
	payload := make([]byte, 1000)
	for i := 0; i < (runs+1)*per; i++ { // queued before reading, so nothing else runs while measuring
		if _, err := from.WriteToUDPAddrPort(payload, to); err != nil {
			t.Fatal(err)
		}
	}
	delivered := 0
	b := newInBatch(drv, drv.recvs[0], link.ReceiverFunc(func(d *link.Datagram, _ clock.Time) {
		if len(d.Data) == len(payload) {
			delivered++
		}
	}), per)
	<-b.done
	read := func() {
		n, err := b.reader.read(b.msgs)
		if err != nil {
			t.Fatal(err)
		}
		b.n = n
		b.deliverNow()
		<-b.done
	}
	if allocs := testing.AllocsPerRun(runs, read); allocs != 0 {
		t.Errorf("%.1f allocations per batch of up to %d", allocs, per)
	}
	if delivered == 0 {
		t.Fatal("nothing delivered")
	}
}

// The source address is read from what the kernel wrote. v4 and v6 sources
// are read as they are, and a v4-mapped v6 source as the v4 peer it is.
// Short or foreign ones are invalid.
func TestSockaddrPort(t *testing.T) {
	var v4 unix.RawSockaddrInet6
	raw := (*[28]byte)(unsafe.Pointer(&v4))
	binary.NativeEndian.PutUint16(raw[0:], unix.AF_INET)
	binary.BigEndian.PutUint16(raw[2:], 4791)
	copy(raw[4:], []byte{10, 1, 2, 3})
	if got := sockaddrPort(&v4, unix.SizeofSockaddrInet4); got != netip.MustParseAddrPort("10.1.2.3:4791") {
		t.Errorf("v4: %v", got)
	}
	if got := sockaddrPort(&v4, 4); got.IsValid() {
		t.Errorf("short v4: %v", got)
	}
	v6 := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: netip.MustParseAddr("fd00::7").As16()}
	binary.BigEndian.PutUint16((*[28]byte)(unsafe.Pointer(&v6))[2:], 9)
	if got := sockaddrPort(&v6, unix.SizeofSockaddrInet6); got != netip.MustParseAddrPort("[fd00::7]:9") {
		t.Errorf("v6: %v", got)
	}
	v6.Addr = netip.MustParseAddr("::ffff:192.0.2.1").As16()
	if got := sockaddrPort(&v6, unix.SizeofSockaddrInet6); got != netip.MustParseAddrPort("192.0.2.1:9") {
		t.Errorf("v4-mapped: %v", got)
	}
	if got := sockaddrPort(&unix.RawSockaddrInet6{Family: unix.AF_UNIX}, 28); got.IsValid() {
		t.Errorf("AF_UNIX: %v", got)
	}
}

// FuzzSockaddrPort feeds any bytes and length as a source address. Nothing
// panics, and a valid answer carries the port the bytes hold.
func FuzzSockaddrPort(f *testing.F) {
	f.Add([]byte{2, 0, 0x12, 0xB7, 127, 0, 0, 1}, uint32(16))
	f.Add([]byte{10, 0, 0, 9, 0, 0, 0, 0, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}, uint32(28))
	f.Fuzz(func(t *testing.T, b []byte, length uint32) {
		var sa unix.RawSockaddrInet6
		raw := (*[28]byte)(unsafe.Pointer(&sa))
		copy(raw[:], b)
		got := sockaddrPort(&sa, length)
		if got.IsValid() && got.Port() != binary.BigEndian.Uint16(raw[2:4]) {
			t.Fatalf("port %d from bytes % x", got.Port(), raw[:4])
		}
	})
}
