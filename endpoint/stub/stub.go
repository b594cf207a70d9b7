// Package stub is the backend of a device that is not there. It reports
// the capabilities it was given, keeps time with the host's clock, and
// answers every other operation with endpoint.ErrNotSupported. It is where
// a NIC driver starts. A driver copies it, keeps the method set, and fills
// each method in as the hardware learns to do it.
package stub

import (
	"context"
	"fmt"
	"time"

	"github.com/mroce/mroce/endpoint"
)

// Stub is a backend with no hardware behind it.
type Stub struct {
	caps endpoint.Caps
}

var _ endpoint.Backend = (*Stub)(nil)

// New returns a stub that claims caps, its Name set to say it is a stub.
func New(caps endpoint.Caps) *Stub {
	caps.Name = fmt.Sprintf("stub (no hardware): %s", caps.Name)
	return &Stub{caps: caps}
}

func notSupported(what string) error {
	return fmt.Errorf("%s: %w", what, endpoint.ErrNotSupported)
}

// Caps reports what the stub was told to claim.
func (s *Stub) Caps() endpoint.Caps { return s.caps }

// AllocPD would create a protection domain in the NIC.
func (s *Stub) AllocPD() (endpoint.PDHandle, error) { return nil, notSupported("alloc PD") }

// DeallocPD would free a protection domain in the NIC.
func (s *Stub) DeallocPD(endpoint.PDHandle) error { return notSupported("dealloc PD") }

// RegisterMR would program the NIC's translation and protection table.
func (s *Stub) RegisterMR(endpoint.PDHandle, []byte, endpoint.Access) (endpoint.MRHandle, error) {
	return nil, notSupported("register memory")
}

// RegisterQPMR would program the table with a key bound to one queue pair.
func (s *Stub) RegisterQPMR(endpoint.QPHandle, []byte, endpoint.Access) (endpoint.MRHandle, error) {
	return nil, notSupported("register memory for a connection")
}

// DeregisterMR would revoke the key and unpin the memory.
func (s *Stub) DeregisterMR(endpoint.MRHandle) error { return notSupported("deregister memory") }

// CreateSRQ would create a shared receive queue in the NIC.
func (s *Stub) CreateSRQ(endpoint.PDHandle) (endpoint.SRQHandle, error) {
	return nil, notSupported("create SRQ")
}

// PostSRQRecv would ring the shared receive queue's doorbell.
func (s *Stub) PostSRQRecv(endpoint.SRQHandle, endpoint.RecvWR) error {
	return notSupported("post SRQ receive")
}

// DestroySRQ would free a shared receive queue in the NIC.
func (s *Stub) DestroySRQ(endpoint.SRQHandle) error { return notSupported("destroy SRQ") }

// Connect would start the handshake from the NIC.
func (s *Stub) Connect(endpoint.PDHandle, endpoint.Remote, endpoint.SRQHandle, endpoint.Sink) (endpoint.QPHandle, error) {
	return nil, notSupported("connect")
}

// Listen would let the NIC accept connections.
func (s *Stub) Listen(endpoint.PDHandle, endpoint.SRQHandle, func(endpoint.QPHandle) (endpoint.Sink, bool)) (endpoint.ListenerHandle, error) {
	return nil, notSupported("listen")
}

// CloseListener would stop the NIC accepting connections.
func (s *Stub) CloseListener(endpoint.ListenerHandle) error { return notSupported("close listener") }

// PostSend would ring the send doorbell.
func (s *Stub) PostSend(endpoint.QPHandle, endpoint.SendWR) error { return notSupported("post send") }

// PostRecv would ring the receive doorbell.
func (s *Stub) PostRecv(endpoint.QPHandle, endpoint.RecvWR) error {
	return notSupported("post receive")
}

// CloseQP would tear the connection down.
func (s *Stub) CloseQP(endpoint.QPHandle) error { return notSupported("close") }

// AbortQP would tear the connection down at once, telling the peer the
// application's code.
func (s *Stub) AbortQP(endpoint.QPHandle, uint32) error { return notSupported("abort") }

// Params would read what the NIC's handshake settled.
func (s *Stub) Params(endpoint.QPHandle) endpoint.ConnParams { return endpoint.ConnParams{} }

// Telemetry would read the NIC's per-path counters.
func (s *Stub) Telemetry(endpoint.QPHandle) []endpoint.PathTelemetry { return nil }

// Received reports nothing counted.
func (s *Stub) Received(endpoint.QPHandle) endpoint.ReceiveCounters {
	return endpoint.ReceiveCounters{}
}

// Progress would poll the NIC's completion queues; the stub has none.
func (s *Stub) Progress(context.Context, func() bool) error { return notSupported("progress") }

// AfterFunc keeps the API's deadlines on the host's clock, as a driver
// does: a NIC's connections run in real time. The stub makes no listener
// that would arm one.
func (s *Stub) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
