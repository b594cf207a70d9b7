package engine

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/mroce/mroce/proto"
)

// Errors a connection can end with.
var (
	ErrTimeout       = errors.New("engine: no forward progress: the peer is gone or unreachable")
	ErrConnectFailed = errors.New("engine: handshake timed out")
	ErrClosed        = errors.New("engine: connection closed")
	ErrRefused       = errors.New("engine: connection refused by the peer")
	ErrNotReady      = errors.New("engine: connection not established")
)

// endedError is a post to a connection that has ended: ErrClosed, and
// the reason it ended, which is its message.
type endedError struct{ cause error }

func (e *endedError) Error() string   { return e.cause.Error() }
func (e *endedError) Unwrap() []error { return []error{ErrClosed, e.cause} }

// ended is the error of a post to a connection that ended with err.
func ended(err error) error {
	if err == nil || err == ErrClosed {
		return ErrClosed
	}
	return &endedError{err}
}

// PathMTUError ends a connection whose packet did not fit a path. The
// kernel refused a Size-byte datagram from Src to Dst as larger than the
// path MTU. The connection's MaxPacket must come down to what the path
// carries.
type PathMTUError struct {
	Src, Dst  netip.AddrPort
	Size      int
	MaxPacket int
}

func (e *PathMTUError) Error() string {
	return fmt.Sprintf("engine: path MTU: a %d-byte packet from %v to %v does not fit the path (refused as too big; DF is set, nothing is fragmented); the connection's MaxPacket is %d: lower it to what the path carries",
		e.Size, e.Src, e.Dst, e.MaxPacket)
}

// ProtocolError is a fatal condition this side detected. The peer is told
// with CLOSE FATAL carrying Code (spec section 8.4).
type ProtocolError struct {
	Code proto.NackCode
	Msg  string
}

func (e *ProtocolError) Error() string { return "engine: " + e.Msg }

// AbortError is a connection an application ended at once with Code:
// this side's, or the peer's when Remote is set (CLOSE APPLICATION, spec
// section 8.4). The code's meaning is the application's.
type AbortError struct {
	Code   uint32
	Remote bool
}

func (e *AbortError) Error() string {
	if e.Remote {
		return fmt.Sprintf("engine: the peer's application ended the connection with code %d", e.Code)
	}
	return fmt.Sprintf("engine: the application ended the connection with code %d", e.Code)
}

// RemoteError is a fatal NACK or a CLOSE from the peer.
type RemoteError struct {
	Nack   proto.NackCode
	Reason proto.CloseReason
	Detail uint32
}

func (e *RemoteError) Error() string {
	if e.Nack != 0 {
		return fmt.Sprintf("engine: the peer refused a request: NACK %v", e.Nack)
	}
	return fmt.Sprintf("engine: the peer closed the connection: %v (detail %d)", e.Reason, e.Detail)
}
