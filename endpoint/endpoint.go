// Package endpoint is mroce's verbs-style API, as an RDMA programmer knows
// it. It offers devices, protection domains, registered memory,
// completion queues, shared receive queues and queue pairs. A queue pair
// is a connection with many paths below and many ordered streams above.
// The API is defined over a Backend and has only types of its own.
// Package endpoint/software is the backend over mroce's own engine, and
// package endpoint/stub is where a NIC driver starts.
//
// A program opens a Device on a backend, allocates a protection domain,
// registers its buffers and creates completion queues. It connects, or
// listens and accepts, then posts work requests and polls or waits for
// their completions. Every object has a Close, which for a region is
// Deregister. Close is idempotent. It releases what the backend holds for
// the object and for everything made from it, and leaves later calls to
// fail with an error that matches ErrClosed. Everything is safe to call
// from any goroutine.
package endpoint

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Caps describes what a backend can do.
type Caps struct {
	Name       string
	MaxPaths   int
	MaxStreams int
	MaxPacket  int
	Planes     int
	Atomics    bool
}

// Remote names a peer by its address on each plane, in plane order, and
// the port it listens on.
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

// SendWR is a send-side work request, a WRITE, WRITE_IMM, SEND, READ,
// FETCH_ADD or CMP_SWAP.
type SendWR struct {
	ID     uint64
	Op     Opcode
	Stream uint16
	// SGL is the local buffers, in order. WRITE and SEND gather from them,
	// and READ scatters into them. An atomic's is 8 bytes of local write,
	// where the target's value before the operation lands, big-endian.
	SGL []SGE
	// RKey and RemoteOffset name the peer's region of a WRITE, WRITE_IMM
	// or READ, or an atomic's 8 bytes, at a multiple of 8 in a region
	// that grants RemoteAtomic (docs/spec.md section 5.12).
	RKey, RemoteOffset uint64
	// Add is what a FETCH_ADD adds to the target. A CMP_SWAP writes Swap
	// if the target holds Compare.
	Add, Compare, Swap uint64
	// Imm is a WRITE_IMM's immediate data.
	Imm       uint32
	Solicited bool
	// Unsignaled asks for no completion when it succeeds.
	Unsignaled bool
}

// RecvWR is a receive, the buffers a SEND or a WRITE_IMM's notice lands
// in.
type RecvWR struct {
	ID     uint64
	Stream uint16
	SGL    []SGE
}

// closedError is an object used after its Close. It matches ErrClosed.
type closedError string

func (e closedError) Error() string        { return "endpoint: " + string(e) }
func (e closedError) Is(target error) bool { return target == ErrClosed }

var (
	errDeviceClosed   = closedError("device is closed")
	errPDClosed       = closedError("protection domain is closed")
	errDeregistered   = closedError("memory region is deregistered")
	errSRQClosed      = closedError("shared receive queue is closed")
	errCQClosed       = closedError("completion queue is closed")
	errQPClosed       = closedError("connection is closed")
	errListenerClosed = closedError("listener is closed")
)

// set is the objects a parent made that are still open, so that closing
// the parent closes them. A nil set is a closed parent's.
type set[T comparable] map[T]struct{}

func (s set[T]) list() []T {
	out := make([]T, 0, len(s))
	for v := range s {
		out = append(out, v)
	}
	return out
}

// Device is a backend opened for use.
type Device struct {
	b   Backend
	mu  sync.Mutex
	pds set[*PD] // nil once closed
	cqs set[*CQ]
}

// Open opens a device on a backend. A backend may be opened more than
// once; each device closes only what was made through it.
func Open(b Backend) *Device { return &Device{b: b, pds: set[*PD]{}, cqs: set[*CQ]{}} }

// Caps reports the device's capabilities.
func (d *Device) Caps() Caps { return d.b.Caps() }

// Close closes every protection domain and completion queue made on the
// device, and with them everything made from those. The backend stays
// open, as it belongs to the host that made it.
func (d *Device) Close() error {
	d.mu.Lock()
	pds, cqs := d.pds.list(), d.cqs.list()
	d.pds, d.cqs = nil, nil
	d.mu.Unlock()
	var errs []error
	for _, pd := range pds {
		errs = append(errs, pd.Close())
	}
	for _, cq := range cqs {
		cq.Close()
	}
	return errors.Join(errs...)
}

// PD is a protection domain.
type PD struct {
	dev  *Device
	h    PDHandle
	mu   sync.Mutex
	open bool
	mrs  set[*MR]
	srqs set[*SRQ]
	qps  set[*QP]
	lis  set[*Listener]
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	closed := d.pds == nil
	d.mu.Unlock()
	if closed {
		return nil, errDeviceClosed
	}
	h, err := d.b.AllocPD()
	if err != nil {
		return nil, err
	}
	pd := &PD{dev: d, h: h, open: true, mrs: set[*MR]{}, srqs: set[*SRQ]{}, qps: set[*QP]{}, lis: set[*Listener]{}}
	d.mu.Lock()
	if d.pds == nil {
		d.mu.Unlock()
		d.b.DeallocPD(h)
		return nil, errDeviceClosed
	}
	d.pds[pd] = struct{}{}
	d.mu.Unlock()
	return pd, nil
}

// adopt records a child of the domain; it reports false, and records
// nothing, once the domain is closed.
func (pd *PD) adopt(add func()) bool {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if !pd.open {
		return false
	}
	add()
	return true
}

// forget drops a closed child.
func (pd *PD) forget(drop func()) {
	pd.mu.Lock()
	drop()
	pd.mu.Unlock()
}

func (pd *PD) isOpen() bool {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	return pd.open
}

// Close closes the domain's listeners and connections, closes its shared
// receive queues, deregisters its regions and then frees the domain.
func (pd *PD) Close() error {
	pd.mu.Lock()
	if !pd.open {
		pd.mu.Unlock()
		return nil
	}
	pd.open = false
	lis, qps, srqs, mrs := pd.lis.list(), pd.qps.list(), pd.srqs.list(), pd.mrs.list()
	pd.lis, pd.qps, pd.srqs, pd.mrs = nil, nil, nil, nil
	pd.mu.Unlock()
	var errs []error
	for _, l := range lis {
		errs = append(errs, l.Close())
	}
	for _, qp := range qps {
		errs = append(errs, qp.Close())
	}
	for _, q := range srqs {
		errs = append(errs, q.Close())
	}
	for _, m := range mrs {
		errs = append(errs, m.Deregister())
	}
	errs = append(errs, pd.dev.b.DeallocPD(pd.h))
	d := pd.dev
	d.mu.Lock()
	delete(d.pds, pd)
	d.mu.Unlock()
	return errors.Join(errs...)
}

// MR is a registered memory region.
type MR struct {
	pd   *PD
	h    MRHandle
	mu   sync.Mutex // serializes Deregister
	gone atomic.Bool
}

// RegisterMR registers buf with the given access. Its key reaches it on
// every connection of the domain; QP.RegisterMR makes one that a single
// connection reaches.
func (pd *PD) RegisterMR(buf []byte, access Access) (*MR, error) {
	if !pd.isOpen() {
		return nil, errPDClosed
	}
	return pd.adoptMR(pd.dev.b.RegisterMR(pd.h, buf, access))
}

// adoptMR records a region the backend registered in the domain, or
// deregisters it when the domain closed meanwhile.
func (pd *PD) adoptMR(h MRHandle, err error) (*MR, error) {
	if err != nil {
		return nil, err
	}
	m := &MR{pd: pd, h: h}
	if !pd.adopt(func() { pd.mrs[m] = struct{}{} }) {
		pd.dev.b.DeregisterMR(h)
		return nil, errPDClosed
	}
	return m, nil
}

// RKey is the key a peer uses to reach the region.
func (m *MR) RKey() uint64 { return m.h.Key() }

// Bytes is the registered memory.
func (m *MR) Bytes() []byte { return m.h.Bytes() }

// Handle is the backend's handle of the region.
func (m *MR) Handle() MRHandle { return m.h }

// Deregister revokes the region's key, for packets already in flight too,
// and waits for placements in progress. Once it returns nothing reaches
// the memory, and work requests naming the region are refused. A second
// call does nothing.
func (m *MR) Deregister() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone.Load() {
		return nil
	}
	if err := m.pd.dev.b.DeregisterMR(m.h); err != nil {
		return err
	}
	m.gone.Store(true)
	m.pd.forget(func() { delete(m.pd.mrs, m) })
	return nil
}

// SGE names length bytes at offset of the region.
func (m *MR) SGE(offset uint64, length uint32) SGE { return SGE{MR: m, Offset: offset, Length: length} }

// checkSGL refuses buffers without a region or in a deregistered one.
func checkSGL(list []SGE) error {
	for _, e := range list {
		switch {
		case e.MR == nil:
			return errors.New("endpoint: a buffer without a registered region")
		case e.MR.gone.Load():
			return errDeregistered
		}
	}
	return nil
}

// SRQ is a shared receive queue.
type SRQ struct {
	pd     *PD
	h      SRQHandle
	mu     sync.Mutex
	closed bool
}

// CreateSRQ makes a shared receive queue.
func (pd *PD) CreateSRQ() (*SRQ, error) {
	if !pd.isOpen() {
		return nil, errPDClosed
	}
	h, err := pd.dev.b.CreateSRQ(pd.h)
	if err != nil {
		return nil, err
	}
	q := &SRQ{pd: pd, h: h}
	if !pd.adopt(func() { pd.srqs[q] = struct{}{} }) {
		pd.dev.b.DestroySRQ(h)
		return nil, errPDClosed
	}
	return q, nil
}

func (q *SRQ) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// PostRecv posts a receive on the shared queue.
func (q *SRQ) PostRecv(id uint64, sgl ...SGE) error {
	if q.isClosed() {
		return errSRQClosed
	}
	if err := checkSGL(sgl); err != nil {
		return err
	}
	return q.pd.dev.b.PostSRQRecv(q.h, RecvWR{ID: id, SGL: sgl})
}

// Close destroys the queue; it takes no more receives, and connections
// made with it afterwards are refused.
func (q *SRQ) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.mu.Unlock()
	err := q.pd.dev.b.DestroySRQ(q.h)
	q.pd.forget(func() { delete(q.pd.srqs, q) })
	return err
}
