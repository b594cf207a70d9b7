package endpoint

import "context"

// Backend is what carries out the API: one implementation of the
// transport. Package endpoint/software is one, over mroce's own engine; a
// NIC driver is another, and package endpoint/stub is where one starts.
// The API calls a backend from any goroutine; a backend serializes what it
// must. It speaks only this package's types.
//
// What a NIC vendor implements, method by method:
//
//   - Caps: the device's limits and features (paths, streams, packet size,
//     planes).
//   - AllocPD, DeallocPD, RegisterMR, DeregisterMR: the NIC's protection
//     domains and memory translation and protection table. RegisterMR
//     makes buf reachable with the given access and returns a handle whose
//     Key is the rkey peers carry in WRITE and READ requests (docs/spec.md
//     section 5.1). DeregisterMR must revoke the key before it returns, for
//     packets already in flight too: they are refused with a NACK (section
//     7), never placed. The API deregisters a domain's regions and closes
//     its other objects before DeallocPD.
//   - CreateSRQ, PostSRQRecv, DestroySRQ: shared receive queues.
//   - Connect, Listen, CloseListener, CloseQP: the connection state machine
//     (the handshake and teardown of docs/spec.md section 8), in hardware
//     or firmware. A connection reports to its Sink, and takes its receives
//     from the shared receive queue given, when one is. CloseListener stops
//     accepting; the connections accepted stay.
//   - PostSend, PostRecv: the doorbells: hand one work request to the NIC.
//     They must not block on the network.
//   - Telemetry: the per-path state and counters (section 6.4) the NIC
//     keeps; of a closed connection, its last, or none.
//   - Progress: wait until cond holds: a driver polls its completion queues
//     or sleeps on its interrupt and delivers completions to the Sinks
//     before evaluating cond.
//
// The API calls nothing with a handle once its close has succeeded, except
// Telemetry.
type Backend interface {
	Caps() Caps
	AllocPD() (PDHandle, error)
	DeallocPD(pd PDHandle) error
	RegisterMR(pd PDHandle, buf []byte, access Access) (MRHandle, error)
	DeregisterMR(mr MRHandle) error
	CreateSRQ(pd PDHandle) (SRQHandle, error)
	PostSRQRecv(srq SRQHandle, wr RecvWR) error
	DestroySRQ(srq SRQHandle) error
	Connect(pd PDHandle, remote Remote, srq SRQHandle, sink Sink) (QPHandle, error)
	Listen(pd PDHandle, srq SRQHandle, accept func(QPHandle) (Sink, bool)) (ListenerHandle, error)
	CloseListener(l ListenerHandle) error
	PostSend(qp QPHandle, wr SendWR) error
	PostRecv(qp QPHandle, wr RecvWR) error
	CloseQP(qp QPHandle) error
	Telemetry(qp QPHandle) []PathTelemetry
	Progress(ctx context.Context, cond func() bool) error
}

// Handles a backend returns; the API never looks inside them.
type (
	PDHandle       any
	SRQHandle      any
	QPHandle       any
	ListenerHandle any
)

// MRHandle is a backend's registered region.
type MRHandle interface {
	// Key is the rkey peers use to reach the region.
	Key() uint64
	// Bytes is the registered memory.
	Bytes() []byte
}

// Sink is where a backend reports a connection's events. Calls may come
// from the backend's own goroutine; they must be quick and must not call
// the backend.
type Sink interface {
	Completion(wc Completion)
	State(s ConnState, err error)
	Path(ev PathEvent)
}
