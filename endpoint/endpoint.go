// Package endpoint is mroce's verbs-style API: devices, protection domains,
// registered memory, completion queues, shared receive queues and queue
// pairs (connections with many paths below and many ordered streams above),
// as an RDMA programmer knows them. It is defined over a Backend: the
// software engine is one (Software), a NIC driver would be another (Stub is
// where one starts).
//
// A program opens a Device on a backend, allocates a protection domain,
// registers its buffers, creates completion queues, connects (or listens and
// accepts), posts work requests and polls or waits for their completions.
// Everything is safe to call from any goroutine.
package endpoint

import "net/netip"

// Caps describes what a backend can do.
type Caps struct {
	Name       string
	MaxPaths   int
	MaxStreams int
	MaxPacket  int
	Planes     int
	Atomics    bool
}

// Remote names a peer: its address on each plane, in plane order, and the
// port it listens on.
type Remote struct {
	Planes []netip.Addr
	Port   uint16
}

// SGE is length bytes at offset of a registered region.
type SGE struct {
	MR     *MR
	Offset uint64
	Length uint32
}

// SendWR is a send-side work request: WRITE, WRITE_IMM, SEND or READ.
type SendWR struct {
	ID     uint64
	Op     Opcode
	Stream uint16
	// SGL is the local buffers, in order: gathered from for WRITE and
	// SEND, scattered into for READ.
	SGL []SGE
	// RKey and RemoteOffset name the peer's region (WRITE, WRITE_IMM,
	// READ).
	RKey, RemoteOffset uint64
	Imm                uint32 // WRITE_IMM
	Solicited          bool
	// Unsignaled: no completion when it succeeds.
	Unsignaled bool
}

// RecvWR is a receive: buffers a SEND (or a WRITE_IMM's notice) lands in.
type RecvWR struct {
	ID     uint64
	Stream uint16
	SGL    []SGE
}

// Device is a backend opened for use.
type Device struct {
	b Backend
}

// Open opens a device on a backend.
func Open(b Backend) *Device { return &Device{b: b} }

// Caps reports the device's capabilities.
func (d *Device) Caps() Caps { return d.b.Caps() }

// PD is a protection domain.
type PD struct {
	dev *Device
	h   PDHandle
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	h, err := d.b.AllocPD()
	if err != nil {
		return nil, err
	}
	return &PD{dev: d, h: h}, nil
}

// MR is a registered memory region.
type MR struct {
	pd *PD
	h  MRHandle
}

// RegisterMR registers buf with the given access.
func (pd *PD) RegisterMR(buf []byte, access Access) (*MR, error) {
	h, err := pd.dev.b.RegisterMR(pd.h, buf, access)
	if err != nil {
		return nil, err
	}
	return &MR{pd: pd, h: h}, nil
}

// RKey is the key a peer uses to reach the region.
func (m *MR) RKey() uint64 { return m.h.Key() }

// Bytes is the registered memory.
func (m *MR) Bytes() []byte { return m.h.Bytes() }

// Handle is the backend's handle of the region.
func (m *MR) Handle() MRHandle { return m.h }

// Deregister revokes the region's key and waits for placements in progress.
func (m *MR) Deregister() error { return m.pd.dev.b.DeregisterMR(m.h) }

// SGE names length bytes at offset of the region.
func (m *MR) SGE(offset uint64, length uint32) SGE { return SGE{MR: m, Offset: offset, Length: length} }

// SRQ is a shared receive queue.
type SRQ struct {
	pd *PD
	h  SRQHandle
}

// CreateSRQ makes a shared receive queue.
func (pd *PD) CreateSRQ() (*SRQ, error) {
	h, err := pd.dev.b.CreateSRQ(pd.h)
	if err != nil {
		return nil, err
	}
	return &SRQ{pd: pd, h: h}, nil
}

// PostRecv posts a receive on the shared queue.
func (q *SRQ) PostRecv(id uint64, sgl ...SGE) error {
	return q.pd.dev.b.PostSRQRecv(q.h, RecvWR{ID: id, SGL: sgl})
}
