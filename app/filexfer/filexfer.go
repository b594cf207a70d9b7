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
	"hash"
	"io"
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

// SendFile sends size bytes from r under name, chunk bytes per SEND with
// at most depth in flight, calls progress after each chunk, and waits for
// the receiver's verdict. If it cannot finish, because the reader fails
// for one, it closes the connection so that the receiver stops waiting.
func SendFile(ctx context.Context, c Conn, r io.Reader, name string, size int64, chunk, depth int, progress func(Progress)) (res Result, err error) {
	defer func() {
		if err != nil {
			c.QP.Close()
		}
	}()
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	if depth <= 0 {
		depth = DefaultDepth
	}
	res = Result{Header: Header{Name: name, Size: size, Chunk: chunk}}
	began := time.Now()
	// The verdict's buffer, posted before anything is sent.
	verdictMR, err := c.PD.RegisterMR(make([]byte, maxControl), endpoint.LocalWrite)
	if err != nil {
		return res, err
	}
	if err := c.QP.PostRecv(1<<62, Stream, verdictMR.SGE(0, maxControl)); err != nil {
		return res, err
	}
	bufs, err := c.PD.RegisterMR(make([]byte, depth*chunk), endpoint.LocalWrite)
	if err != nil {
		return res, err
	}
	control, err := c.PD.RegisterMR(make([]byte, 2*maxControl), endpoint.LocalWrite)
	if err != nil {
		return res, err
	}
	post := func(id uint64, mr *endpoint.MR, off uint64, n int) error {
		return c.QP.PostSend(id, Stream, mr.SGE(off, uint32(n)))
	}
	hdr, _ := json.Marshal(res.Header)
	copy(control.Bytes(), hdr)
	if err := post(1<<61, control, 0, len(hdr)); err != nil {
		return res, err
	}
	sum := sha256.New()
	var sent int64
	free := make([]int, 0, depth) // free slots of bufs
	for i := depth - 1; i >= 0; i-- {
		free = append(free, i)
	}
	wcs := make([]endpoint.Completion, depth+2)
	reap := func(block bool) error {
		var k int
		var err error
		if block {
			k, err = c.Send.Wait(ctx, wcs)
		} else {
			k, err = c.Send.Poll(wcs)
		}
		if err != nil {
			return err
		}
		for _, wc := range wcs[:k] {
			if wc.Status != endpoint.StatusOK {
				return fmt.Errorf("filexfer: SEND failed: %v: %v", wc.Status, wc.Err)
			}
			if wc.ID < 1<<61 {
				free = append(free, int(wc.ID))
			}
		}
		return nil
	}
	for sent < size {
		for len(free) == 0 {
			if err := reap(true); err != nil {
				return res, err
			}
		}
		slot := free[len(free)-1]
		free = free[:len(free)-1]
		n := int(min(int64(chunk), size-sent))
		buf := bufs.Bytes()[slot*chunk : slot*chunk+n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return res, fmt.Errorf("filexfer: reading the data at byte %d: %w", sent, err)
		}
		sum.Write(buf)
		if err := post(uint64(slot), bufs, uint64(slot*chunk), n); err != nil {
			return res, err
		}
		sent += int64(n)
		if progress != nil {
			progress(Progress{sent, size})
		}
		if err := reap(false); err != nil {
			return res, err
		}
	}
	res.SHA256 = hex.EncodeToString(sum.Sum(nil))
	tr, _ := json.Marshal(Trailer{SHA256: res.SHA256})
	copy(control.Bytes()[maxControl:], tr)
	if err := post(1<<61+1, control, maxControl, len(tr)); err != nil {
		return res, err
	}
	wc := make([]endpoint.Completion, 1)
	if _, err := c.Recv.Wait(ctx, wc); err != nil {
		return res, fmt.Errorf("filexfer: waiting for the receiver's verdict: %w", err)
	}
	res.Elapsed = time.Since(began)
	if wc[0].Status != endpoint.StatusOK {
		return res, fmt.Errorf("filexfer: the verdict: %v: %v", wc[0].Status, wc[0].Err)
	}
	v, err := parseVerdict(verdictMR.Bytes()[:wc[0].Bytes])
	if err != nil {
		return res, err
	}
	if !v.OK {
		if v.SHA256 != res.SHA256 {
			return res, fmt.Errorf("%w: the receiver computed %s, the sender %s (%s)", ErrMismatch, v.SHA256, res.SHA256, v.Error)
		}
		return res, fmt.Errorf("filexfer: the receiver refused the transfer: %s", v.Error)
	}
	return res, nil
}

// ReceiveFile receives one transfer into the writer open returns for its
// header, keeping depth receive buffers posted. It calls progress after
// each chunk and answers the sender with its verdict.
func ReceiveFile(ctx context.Context, c Conn, depth int, maxChunk int, open func(Header) (io.Writer, error), progress func(Progress)) (Result, error) {
	if depth <= 0 {
		depth = DefaultDepth
	}
	if maxChunk <= 0 {
		maxChunk = DefaultChunk
	}
	var res Result
	slot := max(maxChunk, maxControl)
	bufs, err := c.PD.RegisterMR(make([]byte, depth*slot), endpoint.LocalWrite)
	if err != nil {
		return res, err
	}
	repost := func(i int) error { return c.QP.PostRecv(uint64(i), Stream, bufs.SGE(uint64(i*slot), uint32(slot))) }
	for i := 0; i < depth; i++ {
		if err := repost(i); err != nil {
			return res, err
		}
	}
	next := func() ([]byte, int, error) {
		wc := make([]endpoint.Completion, 1)
		if _, err := c.Recv.Wait(ctx, wc); err != nil {
			return nil, 0, err
		}
		if wc[0].Status != endpoint.StatusOK {
			return nil, 0, fmt.Errorf("filexfer: receive failed: %v: %v", wc[0].Status, wc[0].Err)
		}
		i := int(wc[0].ID)
		return bufs.Bytes()[i*slot : i*slot+int(wc[0].Bytes)], i, nil
	}
	b, i, err := next()
	if err != nil {
		return res, err
	}
	began := time.Now()
	if res.Header, err = parseHeader(b); err != nil {
		return res, c.refuse(err)
	}
	if res.Header.Chunk > maxChunk {
		return res, c.refuse(fmt.Errorf("filexfer: the sender's chunk of %d bytes is over this receiver's %d", res.Header.Chunk, maxChunk))
	}
	if err := repost(i); err != nil {
		return res, err
	}
	w, err := open(res.Header)
	if err != nil {
		return res, c.refuse(err)
	}
	var sum hash.Hash = sha256.New()
	var got int64
	for got < res.Header.Size {
		b, i, err := next()
		if err != nil {
			return res, err
		}
		if len(b) == 0 || got+int64(len(b)) > res.Header.Size {
			return res, c.refuse(fmt.Errorf("%w: a chunk of %d bytes at byte %d of %d", ErrProtocol, len(b), got, res.Header.Size))
		}
		sum.Write(b)
		if _, err := w.Write(b); err != nil {
			return res, c.refuse(fmt.Errorf("filexfer: writing: %w", err))
		}
		got += int64(len(b))
		if err := repost(i); err != nil {
			return res, err
		}
		if progress != nil {
			progress(Progress{got, res.Header.Size})
		}
	}
	b, _, err = next()
	if err != nil {
		return res, err
	}
	res.SHA256 = hex.EncodeToString(sum.Sum(nil))
	tr, err := parseTrailer(b)
	if err != nil {
		return res, c.refuse(err)
	}
	res.Elapsed = time.Since(began)
	v := Verdict{OK: tr.SHA256 == res.SHA256, SHA256: res.SHA256}
	if !v.OK {
		v.Error = "SHA-256 mismatch"
	}
	if err := c.answer(ctx, v); err != nil {
		// The data arrived whole and checked. A sender that closes as
		// soon as it reads the verdict can close before the verdict's
		// acknowledgment reaches us, when the CLOSE takes another plane.
		// The verdict's send then fails as flushed, and the transfer still
		// succeeded.
		if !v.OK || !errors.Is(err, endpoint.ErrClosed) {
			return res, err
		}
	}
	if !v.OK {
		return res, fmt.Errorf("%w: received %s, the sender says %s", ErrMismatch, res.SHA256, tr.SHA256)
	}
	return res, nil
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
	if err := c.QP.PostSend(1<<62, Stream, mr.SGE(0, uint32(len(b)))); err != nil {
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
