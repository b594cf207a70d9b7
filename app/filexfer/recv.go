package filexfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/mroce/mroce/endpoint"
)

// ReceiveFile receives one transfer into the writer open returns for its
// header and answers the sender with its verdict.
func ReceiveFile(ctx context.Context, c Conn, open func(Header) (io.Writer, error), o Options) (Result, error) {
	in, err := AwaitHeader(ctx, c, o)
	if err != nil {
		return Result{}, err
	}
	w, err := open(in.Header)
	if err != nil {
		return Result{Header: in.Header}, in.Refuse(err)
	}
	return in.Receive(ctx, w, o.Progress)
}

// Incoming is a transfer whose header has arrived: the receiver may take
// it with Receive or turn it down with Refuse.
type Incoming struct {
	Header Header
	r      *fileReceiver
	began  time.Time
}

// AwaitHeader posts a receive for the sender's header and waits for it.
// The buffers for the data are registered and posted only by Receive,
// sized by the header's chunk, so that a connection that is never taken
// holds a few KiB and not Depth chunks. A header that is not one, or whose
// chunk is over o.Chunk, is refused here.
func AwaitHeader(ctx context.Context, c Conn, o Options) (*Incoming, error) {
	o = o.withDefaults()
	r, err := newFileReceiver(ctx, c, o)
	if err != nil {
		return nil, c.giveUp(CodeFailed, c.cause("sender", err))
	}
	b, _, err := r.next("header")
	if err != nil {
		r.release()
		return nil, err
	}
	in := &Incoming{r: r, began: time.Now()}
	if in.Header, err = parseHeader(b); err != nil {
		return nil, in.refuse(CodeProtocol, err)
	}
	if in.Header.Chunk > o.Chunk {
		return nil, in.refuse(CodeRefused, fmt.Errorf("filexfer: the sender's chunk of %d bytes is over this receiver's %d", in.Header.Chunk, o.Chunk))
	}
	return in, nil
}

// Refuse turns the transfer down: it tells the sender err in its verdict,
// aborts the connection and returns err.
func (in *Incoming) Refuse(err error) error { return in.refuse(CodeRefused, err) }

func (in *Incoming) refuse(code Code, err error) error {
	defer in.r.release()
	return in.r.c.refuse(code, err)
}

// Receive takes the transfer's data into w, calling progress after each
// chunk when set, and answers the sender with its verdict.
func (in *Incoming) Receive(ctx context.Context, w io.Writer, progress func(Progress)) (Result, error) {
	r := in.r
	defer r.release()
	r.ctx, r.o.Progress = ctx, progress
	res := Result{Header: in.Header}
	if err := r.equip(in.Header.Chunk); err != nil {
		return res, r.c.giveUp(CodeFailed, r.c.cause("sender", err))
	}
	if err := r.receiveData(w, res.Header.Size); err != nil {
		return res, err
	}
	b, _, err := r.next("trailer")
	if err != nil {
		return res, err
	}
	res.SHA256 = hex.EncodeToString(r.sum.Sum(nil))
	tr, err := parseTrailer(b)
	if err != nil {
		return res, r.c.refuse(CodeProtocol, err)
	}
	res.Elapsed = time.Since(in.began)
	return res, r.conclude(res.SHA256, tr.SHA256)
}

// fileReceiver is one transfer's receiving state: the header's buffer,
// the data's buffers, a slot each, and the checksum of what arrived.
type fileReceiver struct {
	ctx    context.Context
	c      Conn
	o      Options
	header *endpoint.MR
	bufs   *endpoint.MR // nil until equip
	slot   int
	sum    hash.Hash
}

// headerSlot is the receive ID of the header's buffer, beyond the data's
// slots.
const headerSlot = 1 << 32

// newFileReceiver registers the header's buffer and posts its receive.
func newFileReceiver(ctx context.Context, c Conn, o Options) (*fileReceiver, error) {
	r := &fileReceiver{ctx: ctx, c: c, o: o, sum: sha256.New()}
	var err error
	if r.header, err = c.PD.RegisterMR(make([]byte, maxControl), endpoint.LocalWrite); err != nil {
		return nil, err
	}
	if err := c.QP.PostRecv(headerSlot, Stream, r.header.SGE(0, maxControl)); err != nil {
		r.release()
		return nil, err
	}
	return r, nil
}

// equip registers o.Depth slots large enough for a chunk of the sender's
// or the trailer, and posts a receive into each. The chunks the sender
// sends before they are posted are held back by RNR for a moment.
func (r *fileReceiver) equip(chunk int) error {
	r.slot = max(chunk, maxControl)
	var err error
	if r.bufs, err = r.c.PD.RegisterMR(make([]byte, r.o.Depth*r.slot), endpoint.LocalWrite); err != nil {
		return err
	}
	for i := 0; i < r.o.Depth; i++ {
		if err := r.repost(i); err != nil {
			return err
		}
	}
	return nil
}

// release deregisters the receiver's buffers.
func (r *fileReceiver) release() {
	r.header.Deregister()
	if r.bufs != nil {
		r.bufs.Deregister()
	}
}

// repost posts the receive of slot i again.
func (r *fileReceiver) repost(i int) error {
	return r.c.QP.PostRecv(uint64(i), Stream, r.bufs.SGE(uint64(i*r.slot), uint32(r.slot)))
}

// next waits for the next message, what, and returns its bytes and its
// slot. A wait that fails gives the transfer up; a receive the sender's
// abort ended names the sender's reason.
func (r *fileReceiver) next(what string) ([]byte, int, error) {
	wc := make([]endpoint.Completion, 1)
	if _, err := wait(r.ctx, r.c.Recv, wc, r.o.Patience, what); err != nil {
		return nil, 0, r.c.giveUp(CodeTimeout, fmt.Errorf("filexfer: waiting for the %s: %w", what, err))
	}
	if wc[0].Status != endpoint.StatusOK {
		return nil, 0, failed("sender", wc[0], "a receive")
	}
	if wc[0].ID == headerSlot {
		return r.header.Bytes()[:wc[0].Bytes], -1, nil
	}
	i := int(wc[0].ID)
	return r.bufs.Bytes()[i*r.slot : i*r.slot+int(wc[0].Bytes)], i, nil
}

// receiveData takes size bytes of data into w, a chunk at a time. A chunk
// that is empty or runs past size breaks the protocol and is refused.
func (r *fileReceiver) receiveData(w io.Writer, size int64) error {
	var got int64
	for got < size {
		if err := r.ctx.Err(); err != nil {
			return r.c.giveUp(CodeInterrupted, err)
		}
		b, i, err := r.next("data")
		if err != nil {
			return err
		}
		if len(b) == 0 || got+int64(len(b)) > size {
			return r.c.refuse(CodeProtocol, fmt.Errorf("%w: a chunk of %d bytes at byte %d of %d", ErrProtocol, len(b), got, size))
		}
		r.sum.Write(b)
		if _, err := w.Write(b); err != nil {
			return r.c.refuse(CodeWrite, fmt.Errorf("filexfer: writing: %w", err))
		}
		got += int64(len(b))
		if err := r.repost(i); err != nil {
			return r.c.giveUp(CodeFailed, r.c.cause("sender", err))
		}
		if r.o.Progress != nil {
			r.o.Progress(Progress{got, size})
		}
	}
	return nil
}

// conclude answers the sender with the verdict on the checksums and
// returns the transfer's outcome.
func (r *fileReceiver) conclude(got, sent string) error {
	v := Verdict{OK: strings.EqualFold(sent, got), SHA256: got} // hex digits of either case (docs/apps.md)
	if !v.OK {
		v.Error = "SHA-256 mismatch"
	}
	if err := r.c.answer(r.ctx, v); err != nil {
		// The data arrived whole and checked. A sender that closes as
		// soon as it reads the verdict can close before the verdict's
		// acknowledgment reaches us, when the CLOSE takes another plane.
		// The verdict's send then fails as flushed, and the transfer still
		// succeeded. An abort is not that.
		if !v.OK || !r.c.QP.ClosedNormally() {
			return err
		}
	}
	if !v.OK {
		return fmt.Errorf("%w: received %s, the sender says %s", ErrMismatch, got, sent)
	}
	return nil
}
