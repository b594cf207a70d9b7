package endpoint

import (
	"errors"
	"fmt"
	"time"
)

// Opcode is the operation of a work request or of its completion.
type Opcode uint8

const (
	OpWrite    Opcode = iota + 1 // RDMA WRITE
	OpWriteImm                   // RDMA WRITE with immediate data
	OpSend                       // SEND
	OpRecv                       // a receive, where a SEND or a WRITE_IMM's notice arrived
	OpRead                       // RDMA READ
	OpFetchAdd                   // atomic fetch-and-add on 8 bytes
	OpCmpSwap                    // atomic compare-and-swap on 8 bytes
)

func (o Opcode) String() string {
	switch o {
	case OpWrite:
		return "WRITE"
	case OpWriteImm:
		return "WRITE_IMM"
	case OpSend:
		return "SEND"
	case OpRecv:
		return "RECV"
	case OpRead:
		return "READ"
	case OpFetchAdd:
		return "FETCH_ADD"
	case OpCmpSwap:
		return "CMP_SWAP"
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// Status is how a work request ended.
type Status uint8

const (
	StatusOK            Status = iota
	StatusFlushed              // the connection ended before the request could complete
	StatusRemoteAccess         // the peer refused the key, the access or the bounds
	StatusRemoteInvalid        // the peer refused the request's stream or operation as invalid
	StatusTimeout              // the connection made no forward progress and failed
	StatusLocalLength          // a received message did not fit the posted receive
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusFlushed:
		return "flushed"
	case StatusRemoteAccess:
		return "remote access error"
	case StatusRemoteInvalid:
		return "remote invalid request"
	case StatusTimeout:
		return "timeout"
	case StatusLocalLength:
		return "local length error"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Completion reports the end of a work request.
type Completion struct {
	ID     uint64
	Op     Opcode
	Status Status
	Stream uint16
	// Bytes is the message length; for a receive, the bytes received.
	Bytes uint32
	// Imm is a WRITE_IMM's immediate data, on the receive completion it
	// brings about, when HasImm is set.
	Imm    uint32
	HasImm bool
	// Solicited is set on the receive completions of solicited messages.
	Solicited bool
	// Err says why, when Status is not ok.
	Err error
}

// Access is what a registered region allows.
type Access uint8

const (
	LocalWrite   Access = 1 << iota // the local side may write it, as receive buffers and READ targets
	RemoteWrite                     // peers may WRITE into it
	RemoteRead                      // peers may READ from it
	RemoteAtomic                    // peers may run atomics on it
)

func (a Access) String() string {
	s := ""
	for _, n := range []struct {
		bit  Access
		name string
	}{{LocalWrite, "local-write"}, {RemoteWrite, "remote-write"}, {RemoteRead, "remote-read"}, {RemoteAtomic, "remote-atomic"}} {
		if a&n.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += n.name
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// ConnState is where a connection is in its life, by docs/spec.md
// section 8.
type ConnState uint8

const (
	Connecting  ConnState = iota // CONNECT sent, no ACCEPT yet
	Accepting                    // ACCEPT sent, waiting for the initiator's first packet
	Established                  // carrying data
	Closed                       // ended; the error says why
)

func (s ConnState) String() string {
	switch s {
	case Connecting:
		return "connecting"
	case Accepting:
		return "accepting"
	case Established:
		return "established"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("ConnState(%d)", uint8(s))
}

// PathState is the state of one path of a connection, by docs/spec.md
// section 6.4.
type PathState uint8

const (
	PathGood       PathState = iota // carries new data
	PathSkip                        // saw a CE mark, so new data prefers other paths for a while
	PathAssumedBad                  // timed out, so it gets no new data and is probed until it answers
	PathDown                        // its plane is down
)

func (s PathState) String() string {
	switch s {
	case PathGood:
		return "GOOD"
	case PathSkip:
		return "SKIP"
	case PathAssumedBad:
		return "ASSUMED_BAD"
	case PathDown:
		return "DOWN"
	}
	return fmt.Sprintf("PathState(%d)", uint8(s))
}

// PathEvent is a change of one path of a connection. It changes state, or
// repaths to another source port by docs/spec.md section 6.3.
type PathEvent struct {
	Path, Plane int
	From, To    PathState
	// Repath is set when the path moved to SrcPort, in Epoch.
	Repath  bool
	SrcPort uint16
	Epoch   uint8
	// At is when it happened, on the backend's clock.
	At time.Duration
}

// RTTEstimate is a path's round-trip time as its sender estimates it. It
// holds the smoothed value, its mean deviation, the smallest seen and the
// samples taken.
type RTTEstimate struct {
	SRTT, RTTVar, Min time.Duration
	Samples           uint64
}

// PathCounters are a path's lifetime counts on the sending side.
type PathCounters struct {
	PacketsSent, BytesSent uint64 // every transmission, retransmissions included
	Retransmits            uint64 // transmissions of content sent before
	Lost                   uint64 // transmissions declared lost by a gap or a timeout
	LocalDrops             uint64 // transmissions the local host dropped on their way out, its queue full; not in Lost
	Timeouts               uint64 // retransmission timeouts
	SpuriousTimeouts       uint64 // the Timeouts whose packets an ACK later reported received
	CEMarks                uint64 // CE marks the peer reported for this path
	Acked                  uint64 // transmissions reported received
	Repaths                uint64
	TailProbes             uint64 // retransmissions of a path's newest unresolved packet as a tail probe, to draw an ACK; a probe of new data is not one
	Copies                 uint64 // retransmissions that sent a probe or a resend a second time, on another plane
}

// ReceiveCounters are what a connection's receive side counted of the
// data the peer sent it.
type ReceiveCounters struct {
	Packets     uint64 // data packets placed
	Bytes       uint64 // their payload
	Duplicates  uint64 // data packets whose DSN had arrived before
	OutOfWindow uint64 // data packets beyond the DSN window, dropped
	CEMarks     uint64 // data packets that arrived marked CE
	AcksSent    uint64
	Nacks       uint64 // data packets refused, every NACK code
}

// PathTelemetry is a snapshot of one path of a connection, by
// docs/spec.md section 6.4.
type PathTelemetry struct {
	Path     int
	Plane    int
	SrcPort  uint16
	Epoch    uint8
	State    PathState
	RTT      RTTEstimate
	InFlight int
	Window   int
	PathCounters
}

// Utilization is how much of its congestion window the path holds in
// flight. Near 1 the window is what limits it. Well under 1, the pacer,
// the receiver's hint or a lack of data does.
func (t PathTelemetry) Utilization() float64 {
	if t.Window <= 0 {
		return 0
	}
	return float64(t.InFlight) / float64(t.Window)
}

// ECNFraction is the share of acknowledged transmissions that were
// CE-marked.
func (t PathTelemetry) ECNFraction() float64 {
	if t.Acked == 0 {
		return 0
	}
	return float64(t.CEMarks) / float64(t.Acked)
}

// Errors a backend reports through the API. A backend may return its own
// error that wraps one of these, so callers test with errors.Is.
var (
	// ErrClosed is an object used after its Close, or a connection that
	// has ended.
	ErrClosed = errors.New("endpoint: closed")
	// ErrTimeout is a connection that made no forward progress, or whose
	// handshake went unanswered.
	ErrTimeout = errors.New("endpoint: timed out")
	// ErrRefused is a connection the peer refused.
	ErrRefused = errors.New("endpoint: refused by the peer")
	// ErrNotReady is a send posted before the connection is established.
	ErrNotReady = errors.New("endpoint: connection not established")
	// ErrNotSupported is what a backend returns for something it cannot do.
	ErrNotSupported = errors.New("endpoint: not supported by this backend")
)

// AbortError ends a connection an application aborted with Code: this
// side's with QP.Abort, or the peer's when Remote is set. The code's
// meaning belongs to the application's protocol. errors.Is finds ErrClosed
// in it, since the connection has ended.
type AbortError struct {
	Code   uint32
	Remote bool
}

func (e *AbortError) Error() string {
	if e.Remote {
		return fmt.Sprintf("endpoint: the peer aborted the connection with code %d", e.Code)
	}
	return fmt.Sprintf("endpoint: aborted with code %d", e.Code)
}

// Is reports ErrClosed as what an AbortError is.
func (e *AbortError) Is(target error) bool { return target == ErrClosed }

// ClosedNormally reports whether err, the error QP.State reports for a
// connection that has ended, is a CLOSE NORMAL, this side's or the
// peer's: not an abort, a timeout or a failure. The error of a request
// posted after the end says only that it ended, whatever the cause, so
// ask QP.State.
func ClosedNormally(err error) bool {
	var abort *AbortError
	return errors.Is(err, ErrClosed) && !errors.As(err, &abort)
}

// ConnParams are what a connection's handshake settled (docs/spec.md
// section 8.2): the smaller of the two sides' limits.
type ConnParams struct {
	Paths, Streams int
	// MaxPacket is the largest packet either side sends, in bytes of UDP
	// payload: header, payload and trailer.
	MaxPacket int
	// PathMTU is, by plane, the largest packet this side has seen cross
	// it (docs/spec.md section 6.7), and PathMTUDone whether every
	// plane's search is over. Where nothing is searched each is MaxPacket.
	// A connection's packets are at most the smallest.
	PathMTU     []int
	PathMTUDone bool
	// Atomics is whether both sides offered atomics (docs/spec.md section
	// 8.3), so that FETCH_ADD and CMP_SWAP may be posted.
	Atomics bool
	// Each side's identity on the wire, as the handshake carried it
	// (docs/spec.md section 8.1): the DstConnID its peer sends to, the
	// first PSN of each of its paths and its first DSN. They are what
	// verbs tools print as the QPN and PSN of each end; the peer's are 0
	// until the handshake has carried them.
	Local, Peer WireIdentity
}

// WireIdentity is one side's connection id and first sequence numbers.
type WireIdentity struct {
	ConnID     uint32
	InitialPSN uint32
	InitialDSN uint32
}
