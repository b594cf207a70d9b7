// Package endpoint is mroce's verbs-style API: devices, protection domains,
// registered memory, completion queues and queue pairs (connections with
// many paths below and many ordered streams above), as an RDMA programmer
// knows them. It is defined over a Backend: the software engine is one
// (Software), a NIC driver would be another.
//
// A program opens a Device on a backend, allocates a protection domain,
// registers its buffers, creates completion queues, connects (or listens and
// accepts), posts work requests and polls or waits for their completions.
// Everything is safe to call from any goroutine.
package endpoint

import (
	"context"
	"errors"
	"net/netip"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/pathmgr"
)

// The work-request and completion vocabulary is the engine's.
type (
	Completion = engine.Completion
	Status     = engine.Status
	Opcode     = engine.Opcode
	Access     = memreg.Access
)

const (
	OpWrite    = engine.OpWrite
	OpWriteImm = engine.OpWriteImm
	OpSend     = engine.OpSend
	OpRecv     = engine.OpRecv

	StatusOK = engine.StatusOK

	LocalWrite   = memreg.LocalWrite
	RemoteWrite  = memreg.RemoteWrite
	RemoteRead   = memreg.RemoteRead
	RemoteAtomic = memreg.RemoteAtomic
)

// Caps describes what a backend can do.
type Caps struct {
	Name       string
	MaxPaths   int
	MaxStreams int
	MaxPacket  int
	Planes     int
}

// Remote names a peer: its address on each plane, in plane order, and the
// port it listens on.
type Remote struct {
	Planes []netip.Addr
	Port   uint16
}

// Backend is what carries out the API: the software engine, or a NIC.
// Handles it returns are opaque to the API.
type Backend interface {
	Caps() Caps
	NewDomain() (any, error)
	Register(domain any, buf []byte, access Access) (*memreg.Region, error)
	Deregister(r *memreg.Region) error
	// Connect starts a connection whose completions go to sink; Progress
	// waits for it.
	Connect(domain any, remote Remote, sink func(Completion), state func(engine.ConnState, error)) (QPHandle, error)
	// Listen offers new connections to accept, which returns the sinks of
	// an accepted one (or false to refuse it).
	Listen(domain any, accept func(QPHandle) (sink func(Completion), state func(engine.ConnState, error), ok bool)) error
	PostSend(qp QPHandle, wr engine.SendWR) error
	PostRecv(qp QPHandle, wr engine.RecvWR) error
	Close(qp QPHandle) error
	Telemetry(qp QPHandle) []pathmgr.Telemetry
	// Progress returns when cond reports true (cond runs where the backend's
	// state may be read) or ctx ends. A backend whose events need driving
	// (a simulation) drives them here.
	Progress(ctx context.Context, cond func() bool) error
	// Do runs f where the backend's state may be touched, and waits.
	Do(f func())
}

// QPHandle is a backend's connection.
type QPHandle interface{}

// Errors of the API.
var (
	ErrCQOverflow = errors.New("endpoint: completion queue overflow: completions were lost")
	ErrClosed     = errors.New("endpoint: closed")
)

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
	dev    *Device
	handle any
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	h, err := d.b.NewDomain()
	if err != nil {
		return nil, err
	}
	return &PD{dev: d, handle: h}, nil
}

// MR is a registered memory region.
type MR struct {
	pd     *PD
	region *memreg.Region
}

// RegisterMR registers buf with the given access.
func (pd *PD) RegisterMR(buf []byte, access Access) (*MR, error) {
	r, err := pd.dev.b.Register(pd.handle, buf, access)
	if err != nil {
		return nil, err
	}
	return &MR{pd: pd, region: r}, nil
}

// RKey is the key a peer uses to reach the region.
func (m *MR) RKey() uint64 { return m.region.Key() }

// Bytes is the registered memory.
func (m *MR) Bytes() []byte { return m.region.Bytes() }

// Deregister revokes the region's key and waits for placements in progress.
func (m *MR) Deregister() error { return m.pd.dev.b.Deregister(m.region) }

// SGE names length bytes at offset of a registered region.
func (m *MR) SGE(offset uint64, length uint32) engine.SGE {
	return engine.SGE{Region: m.region, Offset: offset, Length: length}
}
