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
// Stats.TooBig and dropped, never fragmented, and the engine is told
// (link.TooBigHandler): it learns each plane's path MTU, below the
// interface's too, with padded probes (spec section 6.7).
//
// Not built yet are acting on ICMP errors, and readers that scale to a
// pool of hundreds of ports. Today each port has one goroutine and two batches. On systems
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
