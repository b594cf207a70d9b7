package engine

import (
	"fmt"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/pathmgr"
)

// Opcode is the operation of a work request or completion.
type Opcode uint8

const (
	OpWrite    Opcode = iota + 1 // RDMA WRITE
	OpWriteImm                   // RDMA WRITE with immediate data
	OpSend                       // SEND
	OpRecv                       // a receive, whose completion says a SEND or WRITE_IMM arrived
	OpRead                       // RDMA READ
	OpFetchAdd                   // atomic fetch-and-add (spec section 5.12)
	OpCmpSwap                    // atomic compare-and-swap (spec section 5.12)
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
	StatusRemoteInvalid        // the peer refused the request as invalid, for its stream or operation
	StatusTimeout              // no forward progress for Config.NoProgress
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
	// Bytes is the message length, or for a receive the bytes received.
	Bytes uint32
	// Imm is the immediate data of a WRITE_IMM, in a receive completion
	// with HasImm set.
	Imm    uint32
	HasImm bool
	// Solicited is set on receive completions of solicited messages.
	Solicited bool
	// Err says why, when Status is not ok.
	Err error
}

// SGE is one local buffer, a range of a registered region.
type SGE struct {
	Region *memreg.Region
	Offset uint64
	Length uint32
}

// SendWR is a work request for the send side, a WRITE, WRITE_IMM, SEND,
// READ, FETCH_ADD or CMP_SWAP.
type SendWR struct {
	ID     uint64
	Op     Opcode
	Stream uint16
	// Local is the local buffer. SGL, when not empty, replaces it with a
	// list that the message's bytes run through in order. The bytes are
	// gathered to send, and scattered for a READ. For a READ, Local is
	// where the data lands, and its region must grant local write.
	Local SGE
	SGL   []SGE
	// RKey and RemoteOffset name the target of a WRITE or WRITE_IMM, the
	// peer's region a READ reads, or an atomic's 8 bytes.
	RKey         uint64
	RemoteOffset uint64
	// Add is what a FETCH_ADD adds. A CMP_SWAP writes Swap if the target
	// holds Compare. An atomic's Local is 8 bytes that grant local write,
	// where the target's value before the operation lands, big-endian as
	// the target holds it (spec section 5.12).
	Add, Compare, Swap uint64
	// Imm is the immediate data of a WRITE_IMM.
	Imm uint32
	// Solicited marks a SEND or WRITE_IMM as solicited. Its receive
	// completion says so.
	Solicited bool
	// Unsignaled requests complete without a completion when they succeed.
	// An error is always reported. Completions of a stream come in posting
	// order, so a signaled completion implies that the unsignaled requests
	// before it are done. Signal every Nth request to bound what is
	// outstanding.
	Unsignaled bool
}

// RecvWR posts a receive buffer on a stream. The buffer is Local, or the
// list SGL, or none. A receive with no buffer takes a WRITE_IMM's notice or
// a SEND of no bytes.
type RecvWR struct {
	ID     uint64
	Stream uint16
	Local  SGE
	SGL    []SGE
}

// ConnState is where a connection is in its life.
type ConnState uint8

const (
	Connecting  ConnState = iota // CONNECT sent, no ACCEPT yet
	Accepting                    // ACCEPT sent, waiting for the initiator's first packet
	Established                  // carrying data
	Closed                       // ended, see Conn.Err
)

func (s ConnState) String() string {
	return [...]string{"connecting", "accepting", "established", "closed"}[s]
}

// Events receives what a connection reports. Calls come from the engine's
// goroutine. An implementation must not call back into the engine from
// them, except to post work.
type Events interface {
	// Completion reports a finished work request.
	Completion(c *Conn, wc Completion)
	// State reports a state change. err is set when the connection failed.
	State(c *Conn, s ConnState, err error)
}

// PathEvent is a change of one path of a connection, of its state or a
// repath to another source port (spec sections 6.3 and 6.4).
type PathEvent struct {
	Path, Plane int
	From, To    pathmgr.State
	Repath      bool // moved to SrcPort, in Epoch
	SrcPort     uint16
	Epoch       uint8
	At          clock.Time
}

// WriteObserver is an optional interface of Events. A connection whose
// Events implement it tells when each WRITE it received without immediate
// data is placed whole, in its stream's order. An RDMA application learns
// nothing of such a WRITE. A simulation uses the call to start what waits
// for the data.
type WriteObserver interface {
	WritePlaced(c *Conn, stream uint16, bytes uint32)
}

// PathObserver is an optional interface of Events. Connections whose Events
// implement it report every path state change and repath.
type PathObserver interface {
	PathChanged(c *Conn, ev PathEvent)
}
