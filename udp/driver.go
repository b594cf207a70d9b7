// Package udp carries an engine's datagrams over real UDP sockets. A Driver
// is the engine's link.Port for sending, and a reader per socket hands
// arriving datagrams to the engine on its clock.Loop. docs/udp.md describes
// the driver and what it measures.
//
// One pool of bound sockets serves every connection of an endpoint. Each
// plane is a local address, one per NIC port, with one socket per source
// port of the pool plus the receive port. A datagram leaves from the socket
// of its Src, whose plane address and source port name the path. However
// many connections and paths there are, the endpoint holds
// planes × (ports + 1) sockets.
//
// Datagrams are written and read in batches. sendmmsg goes through
// golang.org/x/net. recvmmsg goes through a reader of the package's own in
// mmsg_linux.go, which writes into the batch's buffers and allocates
// nothing. It hands the kernel its message headers through unsafe, as the
// system call requires. What the engine sends during one turn of its loop
// is held and goes out at the turn's end. Where the kernel segments with
// UDP_SEGMENT, a run of datagrams of one size to one destination goes as one
// GSO message. On the receive port the kernel joins arriving runs with
// UDP_GRO, and the reader cuts them apart again. Each datagram's ECN and
// DSCP go on the wire as the engine set them and come back as the network
// left them, through IP_TOS and IPV6_TCLASS ancillary data.
//
// Every socket has a reader goroutine. The receive port's reader reads big
// batches. A source-port socket's reads small batches of small datagrams,
// since it gets only CLOSEs and the replies to PROBEs, which return over the
// probe's 5-tuple.
//
// Kernel drops from a receive buffer that overflowed are counted from the
// SO_RXQ_OVFL count the kernel attaches to each datagram.
//
// DF is set on every socket, as section 11 of docs/spec.md requires, and
// New checks the largest datagram against each plane's interface MTU. A
// datagram the kernel still finds too big for its path is counted in
// Stats.TooBig and dropped, never fragmented.
//
// Not built yet are learning a path MTU below the interface's with padded
// probes, ICMP errors, and readers that scale to a pool of hundreds of
// ports. Today each port has one goroutine and two batches. On systems
// other than Linux the ECN field is neither set per datagram nor read,
// drops are not counted, there is no GSO or GRO, and the batch reader is
// x/net's, which allocates an address per datagram.
package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/link"
)

// RTOMin and RTOInitial are the retransmission timeout values that real
// sockets want for the engine. RTOMin is the timeout's floor, and the tail
// probe's as engine.Config.ProbeMin. RTOInitial is the timeout before a
// connection's first RTT sample. software.RealTimeTimers sets them in
// engine.Config. The floor must be above the host's scheduling noise, so
// that an ACK that is late, not lost, is not taken for a loss. RTOInitial
// must outlast the first windows an incast queues. docs/udp.md gives the
// measurements. The engine's defaults are for a data-center fabric in
// virtual time.
const (
	RTOMin     = 10 * time.Millisecond
	RTOInitial = 100 * time.Millisecond
)

// BaseDatagram is the size connections on real sockets start at, as
// engine.Config.BasePacket, before their path MTU search (spec section
// 6.7) shows more: RFC 8899's BASE_PLPMTU, which an IPv6 path's minimum
// MTU of 1,280 bytes carries and any IPv4 path is expected to. An
// interface's MTU says only what its first link carries.
const BaseDatagram = 1200

// Config says which sockets a driver binds.
type Config struct {
	// Planes are the local addresses, one per plane, the same list as the
	// engine's Planes. IPv4 and IPv6 addresses may be mixed.
	Planes []netip.Addr
	// Port is the receive port, the engine's Port.
	Port uint16
	// SourcePorts is the source-port pool, the engine's SourcePorts.
	SourcePorts []uint16
	// MaxDatagram is the largest UDP payload sent or received. It is at
	// most what every plane's interface MTU carries after the IP and UDP
	// headers, and New refuses more. It defaults to that, or to 9,000 if
	// that is less. The engine's MaxPacket must not exceed it.
	MaxDatagram int
	// Batch is how many datagrams one system call moves. It defaults to 64.
	Batch int
	// NoGRO keeps the kernel from joining arriving datagrams. Otherwise the
	// receive port's sockets ask for UDP_GRO.
	NoGRO bool
	// SocketBuffer is each socket's send and receive buffer in bytes. It
	// defaults to 4 MiB. The kernel may cap it at net.core.rmem_max and
	// net.core.wmem_max.
	SocketBuffer int
}

func (c *Config) fill() error {
	if len(c.Planes) == 0 {
		return errors.New("udp: no planes")
	}
	if c.Port == 0 {
		return errors.New("udp: no receive port")
	}
	for _, p := range c.Planes {
		if !p.IsValid() || p.Is4In6() {
			return fmt.Errorf("udp: plane %v: want an IPv4 or IPv6 address (not v4-mapped)", p)
		}
	}
	if c.Batch == 0 {
		c.Batch = 64
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = 4 << 20
	}
	return nil
}

// fitMTU checks MaxDatagram against every plane's interface MTU, or sets
// it to fit when it is 0.
func (c *Config) fitMTU() error {
	fit := 9000
	for _, plane := range c.Planes {
		mtu, ifname, err := InterfaceMTU(plane)
		if err != nil {
			return err
		}
		headers := 20 + 8 // IPv4 without options, and UDP
		if plane.Is6() {
			headers = 40 + 8
		}
		room := mtu - headers
		if c.MaxDatagram > room {
			return fmt.Errorf("udp: plane %v: %s's MTU of %d carries at most %d bytes of UDP payload, not MaxDatagram %d; lower it (and the engine's MaxPacket)",
				plane, ifname, mtu, room, c.MaxDatagram)
		}
		fit = min(fit, room)
	}
	if c.MaxDatagram == 0 {
		c.MaxDatagram = fit
	}
	return nil
}

// InterfaceMTU finds the local interface that holds addr and returns its
// MTU and name.
func InterfaceMTU(addr netip.Addr) (int, string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, "", fmt.Errorf("udp: listing interfaces: %w", err)
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == addr.WithZone("").Unmap() {
				return ifc.MTU, ifc.Name, nil
			}
			// A whole local prefix, such as 127.0.0.0/8 on loopback,
			// answers for every address in it.
			if ifc.Flags&net.FlagLoopback != 0 && ipn.Contains(net.IP(addr.Unmap().AsSlice())) {
				return ifc.MTU, ifc.Name, nil
			}
		}
	}
	return 0, "", fmt.Errorf("udp: plane %v: no local interface has this address", addr)
}

// MaxDatagram is the largest UDP payload the driver carries. The engine's
// MaxPacket must not exceed it.
func (d *Driver) MaxDatagram() int { return d.cfg.MaxDatagram }

// Stats are a driver's counters. Read them with Driver.Stats.
type Stats struct {
	Sent, Received uint64
	// SendCalls counts the system calls that sent. Sent / SendCalls is the
	// batching achieved.
	SendCalls uint64
	// SendErrors counts datagrams the kernel refused, for no route or a
	// destination of the other IP family. They are dropped, as a network
	// would drop them. A full send buffer makes the write wait rather than
	// drop.
	SendErrors uint64
	// TooBig counts datagrams refused with EMSGSIZE as larger than the path
	// MTU. DF is set, so nothing is fragmented, and they are dropped.
	TooBig uint64
	// Segmented counts the datagrams of Sent that went in GSO messages,
	// several datagrams of one size that the kernel cut apart.
	Segmented uint64
	// GSOFallbacks counts GSO messages the kernel refused while their
	// datagrams, sent one by one, passed. GSO is then turned off.
	GSOFallbacks uint64
	// NoSocket counts datagrams whose Src is not one of the driver's
	// sockets. They are dropped.
	NoSocket uint64
	// Padded counts datagrams with link.Datagram.Pad set, bytes a socket
	// has nothing to send for. Only a simulation's placeholders have them,
	// and they are dropped.
	Padded uint64
	// Coalesced counts the datagrams of Received that the kernel joined
	// with GRO, several in one message.
	Coalesced uint64
	// Truncated counts received datagrams longer than MaxDatagram. The
	// kernel cut them, and they are dropped.
	Truncated uint64
	// ECNSeen counts received datagrams whose ECN field was readable.
	ECNSeen uint64
	// KernelDrops counts datagrams the kernel dropped because a socket's
	// receive buffer was full. The kernel reports them with SO_RXQ_OVFL on
	// the next datagram that arrives.
	KernelDrops uint64
	// LocalDrops counts datagrams the local host dropped on their way out
	// because a queue there was full, the qdisc's or the device's. The
	// kernel refuses them with ENOBUFS, and the receiver is told
	// (link.LocalDropHandler).
	LocalDrops uint64
	// ErrorQueue counts the errors read off the sockets' error queues: ICMP
	// errors from the network and the kernel's own refusals. They are
	// dropped.
	ErrorQueue uint64
}

// Driver is the sockets of one endpoint. Send and Buffer, the link.Port's
// methods, are called on the loop goroutine only.
type Driver struct {
	cfg   Config
	loop  *clock.Loop
	socks map[netip.AddrPort]*socket
	recvs []*socket // the receive port's socket on each plane
	gso   bool      // the kernel segments with UDP_SEGMENT

	free     [][]byte        // buffers handed back by Send, for Buffer
	pending  []link.Datagram // what Send holds until Flush
	slots    []slot          // per outgoing message of a batch
	out      []ipv4.Message  // the batch handed to the kernel
	grouped  []bool          // which datagrams of a chunk went out already
	spare    slot            // for resending a refused GSO message singly
	spareMsg [1]ipv4.Message

	// refused holds the datagrams refused as too big during a flush. tooBig
	// is told of them once the flush is over, if the receiver wants to know.
	refused []link.Datagram
	tooBig  link.TooBigHandler
	// dropped holds copies of the datagrams the host dropped on their way
	// out during a flush, in buffers kept for that. localDrop is told of
	// them once the flush is over.
	dropped   []link.Datagram
	dropBufs  [][]byte
	localDrop link.LocalDropHandler
	overflow  link.OverflowHandler // told of datagrams lost in a full receive buffer

	stats Stats // loop goroutine only, like everything the loop runs

	wg        sync.WaitGroup
	closed    chan struct{}
	closeOnce sync.Once
}

// socket is one bound UDP socket.
type socket struct {
	local netip.AddrPort
	conn  *net.UDPConn
	batch batchConn
	v6    bool
	gro   bool   // the kernel joins arriving datagrams with UDP_GRO
	drops uint32 // the kernel's drop count last seen, on the loop goroutine
	// errorQueue counts what was read off the socket's error queue, by its
	// reader or by a send.
	errorQueue atomic.Uint64
}

// reaches reports whether the socket can send to dst. That needs a valid
// address of the socket's own IP family, since v6 sockets are IPv6-only.
func (s *socket) reaches(dst netip.AddrPort) bool {
	a := dst.Addr()
	return dst.IsValid() && dst.Port() != 0 && (s.v6 == (a.Is6() && !a.Is4In6()))
}

// batchConn is what ipv4.PacketConn and ipv6.PacketConn share. Both move
// socket.Message batches.
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

// New binds every socket of cfg. Nothing is read until Start.
func New(cfg Config, loop *clock.Loop) (*Driver, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if err := cfg.fitMTU(); err != nil {
		return nil, err
	}
	d := &Driver{cfg: cfg, loop: loop, socks: map[netip.AddrPort]*socket{}, closed: make(chan struct{})}
	for _, plane := range cfg.Planes {
		ports := append([]uint16{cfg.Port}, cfg.SourcePorts...)
		for i, port := range ports {
			ap := netip.AddrPortFrom(plane, port)
			if _, dup := d.socks[ap]; dup {
				continue
			}
			s, err := bind(ap, cfg.SocketBuffer)
			if err != nil {
				d.closeSockets()
				return nil, err
			}
			d.socks[ap] = s
			if i == 0 {
				d.recvs = append(d.recvs, s)
				s.gro = !cfg.NoGRO && enableGRO(s.conn)
			}
		}
	}
	d.slots = make([]slot, cfg.Batch)
	d.out = make([]ipv4.Message, cfg.Batch)
	d.grouped = make([]bool, cfg.Batch)
	for i := range d.slots {
		d.slots[i].oob = make([]byte, oobSpace)
		d.slots[i].bufs = make([][]byte, 0, maxSegments)
	}
	d.spare.oob = make([]byte, oobSpace)
	d.spare.bufs = make([][]byte, 0, 1)
	d.gso = len(d.recvs) > 0 && canSegment(d.recvs[0].conn)
	loop.AtTurnEnd(d.Flush)
	return d, nil
}

func bind(ap netip.AddrPort, buffer int) (*socket, error) {
	network := "udp4"
	if ap.Addr().Is6() {
		network = "udp6"
	}
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return nil, fmt.Errorf("udp: bind %v: %w", ap, err)
	}
	// Larger buffers ride out the loop's pauses; the kernel may cap them.
	_ = conn.SetReadBuffer(buffer)
	_ = conn.SetWriteBuffer(buffer)
	s := &socket{local: ap, conn: conn, v6: ap.Addr().Is6()}
	if s.v6 {
		s.batch = ipv6.NewPacketConn(conn) // its Message is ipv4's, since both are socket.Message
	} else {
		s.batch = ipv4.NewPacketConn(conn)
	}
	if err := enableAncillary(conn, s.v6); err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp: %v: reading the ECN field: %w", ap, err)
	}
	if err := setDontFragment(conn, s.v6); err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp: %v: setting DF: %w", ap, err)
	}
	if err := setReportErrors(conn, s.v6); err != nil {
		conn.Close()
		return nil, fmt.Errorf("udp: %v: asking for send errors: %w", ap, err)
	}
	return s, nil
}

// Start reads every socket and hands each datagram to r on the loop
// goroutine, with the loop's time. The receive port carries nearly
// everything. A source-port socket gets only what answers a packet at its
// source address, such as a PROBE's reply from section 5.10 of the spec, so
// it reads in small batches.
func (d *Driver) Start(r link.Receiver) {
	d.tooBig, _ = r.(link.TooBigHandler)
	d.localDrop, _ = r.(link.LocalDropHandler)
	d.overflow, _ = r.(link.OverflowHandler)
	for _, s := range d.socks {
		batch := d.cfg.Batch
		switch {
		case s.local.Port() != d.cfg.Port:
			batch = min(batch, 2) // only replies to probes and CLOSEs, few and small
		case s.gro:
			// Each message holds up to 64 KiB of joined datagrams.
			batch = max(1, batch/2)
		}
		d.wg.Add(1)
		go d.read(s, r, batch)
	}
}

// Close closes every socket and waits for the readers to stop.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		close(d.closed)
		d.closeSockets()
		d.wg.Wait()
	})
	return nil
}

func (d *Driver) closeSockets() {
	for _, s := range d.socks {
		s.conn.Close()
	}
}

// Stats returns the driver's counters. Loop goroutine only.
func (d *Driver) Stats() Stats {
	st := d.stats
	for _, s := range d.socks {
		st.ErrorQueue += s.errorQueue.Load()
	}
	return st
}

// LocalPorts returns the bound receive address of every plane.
func (d *Driver) LocalPorts() []netip.AddrPort {
	out := make([]netip.AddrPort, len(d.recvs))
	for i, s := range d.recvs {
		out[i] = s.local
	}
	return out
}

// Buffer implements link.Port.
func (d *Driver) Buffer() []byte {
	if n := len(d.free); n > 0 {
		b := d.free[n-1]
		d.free = d.free[:n-1]
		return b[:0]
	}
	return make([]byte, 0, d.cfg.MaxDatagram)
}

// Send implements link.Port. It holds the datagrams until the end of the
// loop's turn, until Flush, or until a few batches are waiting. Everything
// the engine sends in one turn then goes out together, in fewer system
// calls and with longer runs for GSO to join.
func (d *Driver) Send(batch []link.Datagram) {
	for i := range batch {
		if batch[i].Pad != 0 {
			d.stats.Padded++
			if cap(batch[i].Data) >= d.cfg.MaxDatagram { // one of Buffer's, to reuse
				d.free = append(d.free, batch[i].Data)
			}
			continue
		}
		d.pending = append(d.pending, batch[i])
	}
	if len(d.pending) >= 4*d.cfg.Batch {
		d.sendPending() // the reports wait for Flush: Send never calls the receiver back
	}
}

// Flush sends what Send holds. The datagrams of each Src go out in one
// system call from that Src's socket, in their order. Datagrams of
// different sources, on different paths, need no order between them. An
// engine spraying over paths interleaves them, so grouping only runs of the
// same Src would cost a system call per datagram. The kernel copies each
// datagram, so its buffer is free again when Flush returns. The loop calls
// Flush at the end of every turn, and it runs on the loop goroutine only.
// Then it tells the receiver of the datagrams refused as too big or
// dropped on their way out, and sends what the receiver sent in answer,
// until nothing is left to tell.
func (d *Driver) Flush() {
	for {
		d.sendPending()
		if len(d.refused) == 0 && len(d.dropped) == 0 {
			return
		}
		if len(d.refused) > 0 {
			d.tellRefused()
		}
		if len(d.dropped) > 0 {
			d.tellDropped()
		}
	}
}

// sendPending sends what Send holds.
func (d *Driver) sendPending() {
	batch := d.pending
	for len(batch) > 0 {
		chunk := batch[:min(len(batch), len(d.out))]
		d.sendChunk(chunk)
		for i := range chunk {
			if cap(chunk[i].Data) >= d.cfg.MaxDatagram { // one of Buffer's, to reuse
				d.free = append(d.free, chunk[i].Data)
			}
			chunk[i].Data = nil
		}
		batch = batch[len(chunk):]
	}
	d.pending = d.pending[:0]
}

// sendChunk sends at most len(d.out) datagrams, grouped by source. With
// GSO, each run of one size to one destination goes in one message.
func (d *Driver) sendChunk(chunk []link.Datagram) {
	done := d.grouped[:len(chunk)]
	clear(done)
	for i := range chunk {
		if done[i] {
			continue
		}
		src := chunk[i].Src
		s := d.socks[src]
		n, msgs := 0, 0
		for j := i; j < len(chunk); j++ {
			if done[j] || chunk[j].Src != src {
				continue
			}
			done[j] = true
			n++
			if s == nil {
				continue
			}
			if !s.reaches(chunk[j].Dst) {
				d.stats.SendErrors++
				continue
			}
			if msgs > 0 && d.gso && d.slots[msgs-1].join(&chunk[j]) {
				continue
			}
			d.slots[msgs].start(&chunk[j])
			msgs++
		}
		if s == nil {
			d.stats.NoSocket += uint64(n)
			continue
		}
		for k := range msgs {
			d.slots[k].message(&d.out[k], s.v6)
		}
		d.write(s, d.out[:msgs], d.slots[:msgs])
	}
}

// write sends msgs, the messages of slots, from s. A message the kernel
// refuses is counted and dropped. One the host dropped for a full queue
// (ENOBUFS) is reported as dropped locally, every datagram of it. An error
// the socket held for an earlier datagram, an ICMP error, makes the
// message go again once. A refused GSO message turns GSO off and goes
// again as single datagrams.
func (d *Driver) write(s *socket, msgs []ipv4.Message, slots []slot) {
	retried := -1
	for sent := 0; sent < len(msgs); {
		n, err := s.batch.WriteBatch(msgs[sent:], 0)
		if err == nil {
			for k := sent; k < sent+n; k++ {
				d.stats.Sent += uint64(len(slots[k].bufs))
				if len(slots[k].bufs) > 1 {
					d.stats.Segmented += uint64(len(slots[k].bufs))
				}
			}
			d.stats.SendCalls++
			sent += n
			continue
		}
		// The first message of the rest was refused.
		sl := &slots[sent]
		switch {
		case errors.Is(err, syscall.ENOBUFS):
			d.droppedLocally(s, sl)
		case reportedLate(err) && retried != sent:
			d.drain(s)
			retried = sent
			continue // the error was an earlier datagram's
		case errors.Is(err, syscall.EMSGSIZE) && retried != sent:
			// An ICMP error that the path needs smaller packets is reported
			// at the next call, for whatever it sends. Once the queue is
			// empty a refusal is this message's own.
			d.drain(s)
			retried = sent
			continue
		case len(sl.bufs) > 1:
			// A GSO message's datagrams go one by one. If they pass where
			// the message was refused as invalid or failed in the device,
			// the kernel or device cannot segment, and GSO goes off.
			if d.resendSingly(s, sl) > 0 && (errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EINVAL)) {
				d.gso = false
				d.stats.GSOFallbacks++
			}
		case errors.Is(err, syscall.EMSGSIZE):
			d.refusedTooBig(s, sl.dst, sl.bufs[0])
			d.drain(s) // the kernel queued the refusal as an error too
		default:
			d.stats.SendErrors++
		}
		sent++
	}
}

// reportedLate reports whether a send error is one a socket holds for an
// earlier datagram and gives at its next call: an ICMP error from the
// network, reported because the socket asked for errors (IP_RECVERR).
func reportedLate(err error) bool {
	for _, e := range [...]syscall.Errno{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		syscall.EHOSTDOWN, syscall.EPROTO, syscall.ENOPROTOOPT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// drain empties s's error queue and counts what it held.
func (d *Driver) drain(s *socket) {
	var n int
	control(s.conn, func(fd int) error { n = drainErrors(fd); return nil })
	s.errorQueue.Add(uint64(n))
}

// droppedLocally counts the datagrams of a message the host dropped on
// their way out and keeps copies of them for the receiver, which is told
// after the flush. The copies go in buffers kept for that, so a host that
// drops often allocates nothing.
func (d *Driver) droppedLocally(s *socket, sl *slot) {
	d.stats.LocalDrops += uint64(len(sl.bufs))
	if d.localDrop == nil {
		return
	}
	for _, b := range sl.bufs {
		var buf []byte
		if n := len(d.dropBufs); n > 0 {
			buf, d.dropBufs = d.dropBufs[n-1][:0], d.dropBufs[:n-1]
		} else {
			buf = make([]byte, 0, d.cfg.MaxDatagram)
		}
		d.dropped = append(d.dropped, link.Datagram{Src: s.local, Dst: sl.dst, Data: append(buf, b...)})
	}
}

// tellDropped hands the datagrams dropped on their way out to the
// receiver, and keeps their buffers for the next. What the receiver sends
// in answer may flush and drop again, so the list is taken first.
func (d *Driver) tellDropped() {
	q := d.dropped
	d.dropped = nil
	for i := range q {
		d.localDrop.LocalDrop(&q[i])
		d.dropBufs = append(d.dropBufs, q[i].Data)
		q[i] = link.Datagram{}
	}
	if d.dropped == nil {
		d.dropped = q[:0]
	}
}

// refusedTooBig counts a datagram the kernel refused as larger than its
// path's MTU and tells the receiver. The engine then fails the connection
// with a clear error rather than resend the datagram for ever.
func (d *Driver) refusedTooBig(s *socket, dst netip.AddrPort, data []byte) {
	d.stats.TooBig++
	if d.tooBig != nil {
		// Told after the flush, since the engine may send a CLOSE in reply.
		d.refused = append(d.refused, link.Datagram{Src: s.local, Dst: dst, Data: append([]byte(nil), data...)})
	}
}

// tellRefused hands the datagrams refused as too big to the receiver.
func (d *Driver) tellRefused() {
	q := d.refused
	d.refused = nil
	for i := range q {
		d.tooBig.TooBig(&q[i])
	}
}

// resendSingly sends a refused GSO message's datagrams one at a time and
// returns how many went.
func (d *Driver) resendSingly(s *socket, sl *slot) int {
	one := &d.spare
	went := 0
	for _, b := range sl.bufs {
		one.bufs = append(one.bufs[:0], b)
		one.size, one.dst, one.tos = len(b), sl.dst, sl.tos
		one.message(&d.spareMsg[0], s.v6)
		if _, err := s.batch.WriteBatch(d.spareMsg[:], 0); err != nil {
			if errors.Is(err, syscall.EMSGSIZE) {
				d.refusedTooBig(s, sl.dst, b)
				d.drain(s)
			} else {
				d.stats.SendErrors++
			}
			continue
		}
		went++
		d.stats.Sent++
		d.stats.SendCalls++
	}
	return went
}

// slot is one outgoing message. It holds a datagram, or with GSO several of
// the same size to the same destination that the kernel cuts apart with
// UDP_SEGMENT. Its fields are kept between calls so that sending allocates
// nothing.
type slot struct {
	addr net.UDPAddr
	ip   [16]byte
	bufs [][]byte // the datagrams, gathered, with capacity maxSegments
	size int      // bytes in bufs
	tos  byte
	dst  netip.AddrPort
	oob  []byte
}

// maxDrain bounds the errors read off an error queue at one time, so that a
// flood of ICMP errors cannot hold the loop.
const maxDrain = 1024

// maxSegments bounds a GSO message. A 64 KiB UDP payload holds 15 datagrams
// of 4 KiB, and the kernel's limit is 64 segments.
const maxSegments = 16

// gsoMax is the largest UDP payload one GSO message may carry.
const gsoMax = 65000

// start makes sl send dg alone, for now.
func (sl *slot) start(dg *link.Datagram) {
	sl.bufs = append(sl.bufs[:0], dg.Data)
	sl.size, sl.dst, sl.tos = len(dg.Data), dg.Dst, byte(dg.DSCP)<<2|byte(dg.ECN&3)
}

// join adds dg to sl's segments if GSO can carry them together. That needs
// the same destination and TOS, and every segment but the last of one size.
func (sl *slot) join(dg *link.Datagram) bool {
	seg := len(sl.bufs[0])
	if len(sl.bufs) >= maxSegments || dg.Dst != sl.dst || byte(dg.DSCP)<<2|byte(dg.ECN&3) != sl.tos ||
		len(sl.bufs[len(sl.bufs)-1]) != seg || len(dg.Data) > seg || len(dg.Data) == 0 || sl.size+len(dg.Data) > gsoMax {
		return false
	}
	sl.bufs = append(sl.bufs, dg.Data)
	sl.size += len(dg.Data)
	return true
}

// message makes m send sl from a v4 or v6 socket.
func (sl *slot) message(m *ipv4.Message, v6 bool) {
	a := sl.dst.Addr()
	if v6 {
		sl.ip = a.As16() // a v4 peer from a v6 socket goes as v4-mapped
		sl.addr.IP = sl.ip[:16]
	} else {
		a4 := a.Unmap().As4()
		copy(sl.ip[:4], a4[:])
		sl.addr.IP = sl.ip[:4]
	}
	sl.addr.Port = int(sl.dst.Port())
	oob := sl.oob[:cap(sl.oob)]
	n := putTOS(oob, sl.tos, v6)
	if len(sl.bufs) > 1 {
		n += putSegment(oob[n:], len(sl.bufs[0]))
	}
	*m = ipv4.Message{Buffers: sl.bufs, OOB: oob[:n], Addr: &sl.addr}
}
