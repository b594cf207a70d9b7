package udp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgReader reads batches with recvmmsg(2) straight into a batch's
// buffers. Its headers, scatter lists and address buffers are made once, so
// reading allocates nothing. golang.org/x/net's batch reader allocates a
// net.UDPAddr for every datagram. The headers point into those buffers
// through unsafe, which is how the kernel's msghdr takes them.
type mmsgReader struct {
	s     *socket
	rc    syscall.RawConn
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // room for a v4 or v6 source
	n     int
	errno syscall.Errno
	recv  func(fd uintptr) bool // r.recvmmsg, bound once
}

func newBatchReader(s *socket, msgs []inMsg) batchReader {
	r := &mmsgReader{s: s, hdrs: make([]unix.Mmsghdr, len(msgs)), iovs: make([]unix.Iovec, len(msgs)),
		names: make([]unix.RawSockaddrInet6, len(msgs))}
	r.rc, _ = s.conn.SyscallConn() // a *net.UDPConn always has one
	for i := range msgs {
		r.iovs[i].Base = &msgs[i].buf[0]
		r.iovs[i].SetLen(len(msgs[i].buf))
		h := &r.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[i]
		h.Iovlen = 1
		if len(msgs[i].oob) > 0 {
			h.Control = &msgs[i].oob[0]
		}
	}
	r.recv = r.recvmmsg
	return r
}

// read waits until the socket has datagrams and reads as many as are there,
// at least one and at most len(msgs).
func (r *mmsgReader) read(msgs []inMsg) (int, error) {
	for i := range r.hdrs { // the kernel wrote these last time
		h := &r.hdrs[i].Hdr
		h.Namelen = uint32(unsafe.Sizeof(r.names[i]))
		h.SetControllen(len(msgs[i].oob))
		h.Flags = 0
	}
	r.n, r.errno = 0, 0
	if err := r.rc.Read(r.recv); err != nil {
		return 0, err // closed
	}
	if r.errno != 0 {
		return 0, r.errno
	}
	ioAcquire()
	for i := range msgs[:r.n] {
		h := &r.hdrs[i]
		m := &msgs[i]
		m.n, m.oobn = int(h.Len), int(h.Hdr.Controllen)
		m.trunc = h.Hdr.Flags&unix.MSG_TRUNC != 0
		m.src = sockaddrPort(&r.names[i], h.Hdr.Namelen)
	}
	return r.n, nil
}

// recvmmsg is the system call, run by the runtime when the socket is
// readable. It asks to be run again when nothing was there. An error the
// socket reports for something it sent earlier, from an ICMP error on its
// error queue (setReportErrors), is no reason to stop reading: the queue is
// emptied and the read goes on.
func (r *mmsgReader) recvmmsg(fd uintptr) bool {
	for drained := false; ; {
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(len(r.hdrs)),
			0, 0, 0)
		switch {
		case errno == unix.EINTR:
			continue // interrupted before anything was read
		case errno == unix.EAGAIN:
			return false // nothing there, so the runtime calls again once readable
		case errno != 0 && (reportedLate(errno) || errno == unix.EMSGSIZE) && !drained:
			r.s.errorQueue.Add(uint64(drainErrors(int(fd))))
			drained = true
			continue
		}
		r.n, r.errno = int(n), errno
		return true
	}
}

// sockaddrPort reads a source address the kernel wrote, a sockaddr_in or
// sockaddr_in6 with the port in network byte order. A v4-mapped source on a
// v6 socket is the v4 peer it stands for. Anything else is invalid.
func sockaddrPort(sa *unix.RawSockaddrInet6, length uint32) netip.AddrPort {
	raw := (*[unsafe.Sizeof(unix.RawSockaddrInet6{})]byte)(unsafe.Pointer(sa))
	port := binary.BigEndian.Uint16(raw[2:4])
	switch {
	case sa.Family == unix.AF_INET && length >= unix.SizeofSockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[4:8])), port)
	case sa.Family == unix.AF_INET6 && length >= unix.SizeofSockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
	}
	return netip.AddrPort{}
}

// enableGRO asks the kernel to join datagrams of one flow and size into one
// message with UDP_GRO, from Linux 5.0 on. It reports whether it will.
func enableGRO(conn *net.UDPConn) bool {
	return control(conn, func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1)
	}) == nil
}
