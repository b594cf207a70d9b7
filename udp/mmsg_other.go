//go:build !linux

package udp

import (
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
)

// xnetReader reads batches with golang.org/x/net's batch reader, which
// allocates an address for every datagram.
type xnetReader struct {
	s    *socket
	msgs []ipv4.Message
}

func newBatchReader(s *socket, msgs []inMsg) batchReader {
	r := &xnetReader{s: s, msgs: make([]ipv4.Message, len(msgs))}
	for i := range msgs {
		r.msgs[i].Buffers = [][]byte{msgs[i].buf}
		r.msgs[i].OOB = msgs[i].oob
	}
	return r
}

func (r *xnetReader) read(msgs []inMsg) (int, error) {
	n, err := r.s.batch.ReadBatch(r.msgs, 0)
	if err != nil {
		return 0, err
	}
	ioAcquire()
	for i := range msgs[:n] {
		x := &r.msgs[i]
		m := &msgs[i]
		m.n, m.oobn, m.trunc, m.src = x.N, x.NN, false, netip.AddrPort{}
		if ua, ok := x.Addr.(*net.UDPAddr); ok {
			ap := ua.AddrPort()
			m.src = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
	}
	return n, nil
}
