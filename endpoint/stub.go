package endpoint

import (
	"context"
	"fmt"
)

// Stub is the backend of a device that is not there: it reports the
// capabilities it was given and answers every operation with
// ErrNotSupported. It is where a NIC driver starts: copy it, keep the
// method set, and fill each method in as the hardware learns to do it.
type Stub struct {
	caps Caps
}

// NewStub returns a stub that claims caps (Name set to say it is a stub).
func NewStub(caps Caps) *Stub {
	caps.Name = fmt.Sprintf("stub (no hardware): %s", caps.Name)
	return &Stub{caps: caps}
}

func (s *Stub) notSupported(what string) error {
	return fmt.Errorf("%s: %w", what, ErrNotSupported)
}

// Caps reports what the stub was told to claim.
func (s *Stub) Caps() Caps { return s.caps }

// AllocPD would create a protection domain in the NIC.
func (s *Stub) AllocPD() (PDHandle, error) { return nil, s.notSupported("alloc PD") }

// RegisterMR would program the NIC's translation and protection table.
func (s *Stub) RegisterMR(PDHandle, []byte, Access) (MRHandle, error) {
	return nil, s.notSupported("register memory")
}

// DeregisterMR would revoke the key and unpin the memory.
func (s *Stub) DeregisterMR(MRHandle) error { return s.notSupported("deregister memory") }

// CreateSRQ would create a shared receive queue in the NIC.
func (s *Stub) CreateSRQ(PDHandle) (SRQHandle, error) { return nil, s.notSupported("create SRQ") }

// PostSRQRecv would ring the shared receive queue's doorbell.
func (s *Stub) PostSRQRecv(SRQHandle, RecvWR) error { return s.notSupported("post SRQ receive") }

// Connect would start the handshake from the NIC.
func (s *Stub) Connect(PDHandle, Remote, QPOptions, Sink) (QPHandle, error) {
	return nil, s.notSupported("connect")
}

// Listen would let the NIC accept connections.
func (s *Stub) Listen(PDHandle, QPOptions, func(QPHandle) (Sink, bool)) error {
	return s.notSupported("listen")
}

// PostSend would ring the send doorbell.
func (s *Stub) PostSend(QPHandle, SendWR) error { return s.notSupported("post send") }

// PostRecv would ring the receive doorbell.
func (s *Stub) PostRecv(QPHandle, RecvWR) error { return s.notSupported("post receive") }

// CloseQP would tear the connection down.
func (s *Stub) CloseQP(QPHandle) error { return s.notSupported("close") }

// Telemetry would read the NIC's per-path counters.
func (s *Stub) Telemetry(QPHandle) []PathTelemetry { return nil }

// Progress would poll the NIC's completion queues; the stub has none.
func (s *Stub) Progress(context.Context, func() bool) error { return s.notSupported("progress") }
