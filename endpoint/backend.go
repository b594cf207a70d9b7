package endpoint

import (
	"context"
	"time"
)

// Backend carries out the API as one implementation of the transport.
// Package endpoint/software is one, over mroce's own engine. A NIC driver
// is another, and package endpoint/stub is where one starts. The API
// calls a backend from any goroutine, and a backend serializes what it
// must. It speaks only this package's types.
//
// A NIC vendor implements the methods as follows.
//
//   - Caps reports the device's limits and features, such as paths,
//     streams, packet size and planes.
//   - AllocPD, DeallocPD, RegisterMR and DeregisterMR are the NIC's
//     protection domains and memory translation and protection table.
//     RegisterMR makes buf reachable with the given access and returns a
//     handle whose Key is the rkey peers carry in WRITE and READ requests,
//     as docs/spec.md section 5.1 says. DeregisterMR must revoke the key
//     before it returns, for packets already in flight too. They are
//     refused with a NACK of section 7 and never placed. The API
//     deregisters a domain's regions and closes its other objects before
//     DeallocPD.
//   - RegisterQPMR registers buf in the connection's domain as RegisterMR
//     does, except that its key is honoured only in requests that arrive
//     on that connection: a request with it on any other connection is
//     refused as an unknown key is (docs/spec.md section 5.1). A verbs
//     NIC does this with a type 2 memory window bound to the queue pair.
//     DeregisterMR revokes it.
//   - CreateSRQ, PostSRQRecv and DestroySRQ are shared receive queues.
//   - Connect, Listen, CloseListener and CloseQP are the connection state
//     machine of docs/spec.md section 8, with its handshake and teardown,
//     in hardware or firmware. A connection reports to its Sink, and takes
//     its receives from the shared receive queue given, when one is.
//     CloseListener stops accepting, and the connections accepted stay.
//   - PostSend and PostRecv are the doorbells that hand one work request
//     to the NIC. They must not block on the network. FETCH_ADD and
//     CMP_SWAP (docs/spec.md section 5.12) are atomic among the NIC's
//     own atomics, as verbs' IBV_ATOMIC_HCA: the responder executes each
//     once, in its stream's order, and keeps its result in the
//     ATOMIC_RESP it resends until the requester acknowledges it
//     (section 6.5). A NIC that offers none leaves ATOMICS out of its
//     handshake.
//   - Params reports what the connection's handshake settled, of
//     section 8.2: paths, streams and the largest packet, and whether
//     atomics were negotiated. Before the handshake completes it reports
//     zeros.
//   - Telemetry reports the per-path state and counters of section 6.4
//     that the NIC keeps, and Received what the connection's receive side
//     counts. For a closed connection they report the last, or zeros.
//   - The authenticated mode of docs/spec.md section 13 is the backend's
//     configuration, not a call: the software backend takes it from
//     UDPOptions.Auth. A NIC that offloads it, as PSP offload does, keeps
//     a key table in hardware: per connection and direction, the keys of
//     the current key phase and of the phases either side of it (13.5),
//     and the control sequence number. It seals every packet it sends
//     after the handshake (AES-128-GCM or ChaCha20-Poly1305 over all but
//     the common header, which is the associated data; the nonce from the
//     IV, the path and the PSN, 13.4) and opens every one it receives
//     before it places a byte, dropping and counting one that does not
//     open, and refuses a control packet whose number it opened before
//     (13.6). The handshake's key exchange, X25519 and HKDF, can stay in
//     the driver or firmware, which installs the two secrets the
//     handshake gives (package auth) and the next phases' keys as they
//     are needed.
//   - Progress waits until cond holds. A driver polls its completion
//     queues or sleeps on its interrupt, and delivers completions to the
//     Sinks before evaluating cond. It may evaluate cond once more after
//     it has returned for ctx, so the API's conditions only look.
//   - AfterFunc is the backend's clock, which the API's own deadlines run
//     on: virtual time under a simulation, the host's clock on hardware.
//     It calls f once d has passed, never before AfterFunc returns. f
//     runs where the application's calls run, not where a Sink's do, so
//     it may call the backend. AfterFunc and stop may be called from
//     anywhere, a Sink call included, and stop reports whether it kept f
//     from running.
//
// The API calls nothing with a handle once its close has succeeded, except
// Telemetry.
type Backend interface {
	Caps() Caps
	AllocPD() (PDHandle, error)
	DeallocPD(pd PDHandle) error
	RegisterMR(pd PDHandle, buf []byte, access Access) (MRHandle, error)
	RegisterQPMR(qp QPHandle, buf []byte, access Access) (MRHandle, error)
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
	AbortQP(qp QPHandle, code uint32) error
	Params(qp QPHandle) ConnParams
	Telemetry(qp QPHandle) []PathTelemetry
	Received(qp QPHandle) ReceiveCounters
	Progress(ctx context.Context, cond func() bool) error
	AfterFunc(d time.Duration, f func()) (stop func() bool)
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
