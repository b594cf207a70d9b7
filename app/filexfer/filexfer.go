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
// credits. A sender that cannot finish closes the connection, which
// completes the receiver's posted buffers in error and stops it.
package filexfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
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

// Verdict is the receiver's answer.
type Verdict struct {
	OK     bool   `json:"ok"`
	SHA256 string `json:"sha256"`
	Error  string `json:"error,omitempty"`
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

// refuse tells the sender that the transfer failed and returns err. It
// tries once for 2 s, since the sender may be gone.
func (c Conn) refuse(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.answer(ctx, Verdict{Error: err.Error()})
	return err
}

// answer SENDs the verdict and waits for it to be acknowledged.
func (c Conn) answer(ctx context.Context, v Verdict) error {
	b, _ := json.Marshal(v)
	mr, err := c.PD.RegisterMR(b, endpoint.LocalWrite)
	if err != nil {
		return err
	}
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
