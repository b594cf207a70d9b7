// Package filexfer is the protocol mroce send and mroce recv speak over
// one connection of the verbs API to move a file and confirm that it
// arrived whole.
//
// Everything travels on stream 1, in order, because a stream's messages
// complete in the order they were sent and the protocol then needs no
// sequence numbers of its own.
//
//	sender -> receiver  header   JSON {"name", "size", "chunk"}
//	sender -> receiver  data     ceil(size / chunk) SENDs of chunk bytes, the last maybe shorter
//	sender -> receiver  trailer  JSON {"sha256"}
//	receiver -> sender  verdict  JSON {"ok", "sha256", "error"}
//
// The receiver keeps Depth receive buffers posted. A sender that gets ahead
// is held back by the transport's RNR retry, so the protocol needs no
// credits.
//
// A side that cannot finish gives up at once and says why: it aborts the
// connection with a Code (docs/spec.md section 8.5, CLOSE APPLICATION),
// which ends the other side's waits with a PeerError naming it. A receiver
// that refuses the transfer, or cannot write it, first sends its verdict
// with the reason in words, and the sender reports both. Every wait for
// the peer is bounded by Options.Patience as well as by the connection's
// own liveness.
package filexfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/mroce/mroce/endpoint"
)

// Stream is the stream the protocol uses.
const Stream = 1

// DefaultChunk is the bytes per SEND. A MiB a message keeps the cost of
// each completion small beside the data it moves.
const DefaultChunk = 1 << 20

// DefaultDepth is how many chunks are in flight, and how many receives the
// receiver keeps posted.
const DefaultDepth = 16

// maxControl is the largest header, trailer or verdict.
const maxControl = 4096

// Header opens a transfer.
type Header struct {
	Name  string `json:"name"`
	Size  int64  `json:"size"`
	Chunk int    `json:"chunk"`
}

// Trailer closes the data.
type Trailer struct {
	SHA256 string `json:"sha256"`
}

// Verdict is the receiver's answer. A receiver that gives up before the
// trailer sends no SHA-256, and Code says why.
type Verdict struct {
	OK     bool   `json:"ok"`
	SHA256 string `json:"sha256"`
	Error  string `json:"error,omitempty"`
	Code   Code   `json:"code,omitempty"`
}

// Progress is how far a transfer is.
type Progress struct {
	Bytes, Size int64
}

// Result is a finished transfer as one side saw it.
type Result struct {
	Header  Header
	SHA256  string
	Elapsed time.Duration // time from the header to the verdict
}

// Options are a transfer's settings. Zero values take the defaults.
type Options struct {
	// Chunk is the sender's bytes per SEND, and the largest chunk a
	// receiver takes.
	Chunk int
	// Depth is the chunks in flight, and the receives a receiver keeps
	// posted.
	Depth int
	// Patience bounds each wait for the peer: for a chunk, a free buffer,
	// the trailer or the verdict. A side that waits longer gives up with
	// CodeTimeout. 0 sets no bound beyond the connection's liveness.
	Patience time.Duration
	// Progress, when set, is called after each chunk.
	Progress func(Progress)
}

func (o Options) withDefaults() Options {
	if o.Chunk <= 0 {
		o.Chunk = DefaultChunk
	}
	if o.Depth <= 0 {
		o.Depth = DefaultDepth
	}
	return o
}

// Code is why a side gave up a transfer. It travels to the other side as
// the code of the connection's abort (docs/spec.md section 8.4,
// APPLICATION).
type Code uint32

// Codes of the protocol. 0 is never sent.
const (
	CodeInterrupted Code = 1 // the side was interrupted, by a signal for one
	CodeTimeout     Code = 2 // the side waited for its peer longer than its patience
	CodeRead        Code = 3 // the sender could not read the data
	CodeWrite       Code = 4 // the receiver could not write the data
	CodeProtocol    Code = 5 // the peer broke the protocol
	CodeRefused     Code = 6 // the receiver refused the transfer
	CodeFailed      Code = 7 // the side failed for a reason of its own
)

var codeText = map[Code]string{
	CodeInterrupted: "was interrupted",
	CodeTimeout:     "gave up waiting",
	CodeRead:        "could not read the data",
	CodeWrite:       "could not write the data",
	CodeProtocol:    "saw the protocol broken",
	CodeRefused:     "refused the transfer",
	CodeFailed:      "failed",
}

func (c Code) String() string {
	if t, ok := codeText[c]; ok {
		return t
	}
	return fmt.Sprintf("gave up with code %d", uint32(c))
}

// PeerError is a transfer the other side gave up: Side ("sender" or
// "receiver") aborted with Code, and a receiver's verdict may add Reason.
type PeerError struct {
	Side   string
	Code   Code
	Reason string
}

func (e *PeerError) Error() string {
	msg := "filexfer: the " + e.Side + " " + e.Code.String()
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// ErrImpatient is a wait for the peer that outlasted Options.Patience.
var ErrImpatient = errors.New("filexfer: the peer did not answer in time")

// Conn is one side's connection with its completion queues and domain.
type Conn struct {
	QP         *endpoint.QP
	PD         *endpoint.PD
	Send, Recv *endpoint.CQ
}

// Errors of the protocol.
var (
	ErrMismatch = errors.New("filexfer: the data's SHA-256 does not match the sender's")
	ErrProtocol = errors.New("filexfer: the peer broke the protocol")
)

// NewConn allocates a protection domain of dev and completion queues for
// a connection not yet made. The queues hold a completion for each chunk
// in flight and for the control messages.
func NewConn(dev *endpoint.Device) (Conn, error) {
	pd, err := dev.AllocPD()
	if err != nil {
		return Conn{}, err
	}
	return Conn{PD: pd, Send: dev.CreateCQ(64), Recv: dev.CreateCQ(64)}, nil
}

// Dial connects to the receiver at remote from a new Conn of dev.
func Dial(ctx context.Context, dev *endpoint.Device, remote endpoint.Remote) (Conn, error) {
	c, err := NewConn(dev)
	if err != nil {
		return Conn{}, err
	}
	if c.QP, err = c.PD.Connect(ctx, remote, c.Send, c.Recv, endpoint.QPOptions{}); err != nil {
		c.PD.Close()
		return Conn{}, err
	}
	return c, nil
}

// SafeName is the header's name reduced to its last element, so that a
// receiver that writes into a directory never takes a path from the
// sender. A name with nothing left becomes "received".
func SafeName(name string) string {
	base := filepath.Base(filepath.Clean("/" + name))
	if base == "/" || base == "." {
		return "received"
	}
	return base
}

// giveUp ends the transfer for err. It aborts the connection with the
// code err calls for, so that the peer learns why at once, and returns
// err. A connection the peer already ended takes the abort as a no-op.
func (c Conn) giveUp(code Code, err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		code = CodeInterrupted
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrImpatient):
		code = CodeTimeout
	case code == CodeTimeout:
		code = CodeFailed // a wait that failed for another reason than time
	}
	c.QP.Abort(uint32(code))
	return err
}

// cause is err, or the peer's abort when that is what ended the
// connection; side names the peer. A post to a connection that has ended
// returns why it ended, and so may err.
func (c Conn) cause(side string, err error) error {
	var ae *endpoint.AbortError
	_, cerr := c.QP.State()
	if errors.As(err, &ae) && ae.Remote || errors.As(cerr, &ae) && ae.Remote {
		return &PeerError{Side: side, Code: Code(ae.Code)}
	}
	return err
}

// refuse tells the sender in a verdict why the receiver gives up, then
// aborts with code and returns err. It waits for the verdict at most a
// second, since the sender may be gone.
func (c Conn) refuse(code Code, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.answer(ctx, Verdict{Error: strings.TrimPrefix(err.Error(), "filexfer: "), Code: code})
	return c.giveUp(code, err)
}

// answer SENDs the verdict and waits for it to be acknowledged.
func (c Conn) answer(ctx context.Context, v Verdict) error {
	b, _ := json.Marshal(v)
	mr, err := c.PD.RegisterMR(b, endpoint.LocalWrite)
	if err != nil {
		return err
	}
	defer mr.Deregister()
	if err := c.QP.PostSend(verdictID, Stream, mr.SGE(0, uint32(len(b)))); err != nil {
		return err
	}
	wc := make([]endpoint.Completion, 1)
	if _, err := c.Send.Wait(ctx, wc); err != nil {
		return err
	}
	if wc[0].Status != endpoint.StatusOK {
		return fmt.Errorf("filexfer: sending the verdict: %v: %w", wc[0].Status, wc[0].Err)
	}
	return nil
}

// wait waits for completions on cq for at most patience, when set. A wait
// that runs out ends with ErrImpatient naming what it waited for.
func wait(ctx context.Context, cq *endpoint.CQ, wcs []endpoint.Completion, patience time.Duration, what string) (int, error) {
	if patience <= 0 {
		return cq.Wait(ctx, wcs)
	}
	wctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	k, err := cq.Wait(wctx, wcs)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return k, fmt.Errorf("%w: no %s for %v", ErrImpatient, what, patience)
	}
	return k, err
}

// failed reads the error a failed completion carries. The peer's abort
// becomes a PeerError naming its side and code.
func failed(side string, wc endpoint.Completion, what string) error {
	var ae *endpoint.AbortError
	if errors.As(wc.Err, &ae) && ae.Remote {
		return &PeerError{Side: side, Code: Code(ae.Code)}
	}
	if wc.Err == nil {
		return fmt.Errorf("filexfer: %s failed: %v", what, wc.Status)
	}
	return fmt.Errorf("filexfer: %s failed: %v: %w", what, wc.Status, wc.Err)
}

// parseHeader reads a header, JSON with a size of 0 or more and a chunk of
// 1 or more bytes.
func parseHeader(b []byte) (Header, error) {
	var h Header
	if err := json.Unmarshal(b, &h); err != nil || h.Size < 0 || h.Chunk <= 0 {
		return Header{}, fmt.Errorf("%w: a header that is not one (%q)", ErrProtocol, truncate(b))
	}
	return h, nil
}

// parseTrailer reads a trailer, JSON with a SHA-256 in hex.
func parseTrailer(b []byte) (Trailer, error) {
	var t Trailer
	if err := json.Unmarshal(b, &t); err != nil || !isSHA256(t.SHA256) {
		return Trailer{}, fmt.Errorf("%w: a trailer that is not one (%q)", ErrProtocol, truncate(b))
	}
	return t, nil
}

// parseVerdict reads a verdict, JSON whose SHA-256 is one when present.
func parseVerdict(b []byte) (Verdict, error) {
	var v Verdict
	if err := json.Unmarshal(b, &v); err != nil || v.SHA256 != "" && !isSHA256(v.SHA256) || v.OK && v.SHA256 == "" {
		return Verdict{}, fmt.Errorf("%w: a verdict that is not one (%q)", ErrProtocol, truncate(b))
	}
	return v, nil
}

func isSHA256(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
