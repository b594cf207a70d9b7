package filexfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/mroce/mroce/endpoint"
)

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
	r, err := newFileReceiver(ctx, c, depth, max(maxChunk, maxControl))
	if err != nil {
		return res, err
	}
	b, i, err := r.next()
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
	if err := r.repost(i); err != nil {
		return res, err
	}
	w, err := open(res.Header)
	if err != nil {
		return res, c.refuse(err)
	}
	if err := r.receiveData(w, res.Header.Size, progress); err != nil {
		return res, err
	}
	b, _, err = r.next()
	if err != nil {
		return res, err
	}
	res.SHA256 = hex.EncodeToString(r.sum.Sum(nil))
	tr, err := parseTrailer(b)
	if err != nil {
		return res, c.refuse(err)
	}
	res.Elapsed = time.Since(began)
	return res, r.conclude(res.SHA256, tr.SHA256)
}

// fileReceiver is one ReceiveFile's state: its receive buffers, a slot
// each, and the checksum of what arrived.
type fileReceiver struct {
	ctx  context.Context
	c    Conn
	bufs *endpoint.MR
	slot int
	sum  hash.Hash
}

// newFileReceiver registers depth slots of slot bytes and posts a receive
// into each.
func newFileReceiver(ctx context.Context, c Conn, depth, slot int) (*fileReceiver, error) {
	r := &fileReceiver{ctx: ctx, c: c, slot: slot, sum: sha256.New()}
	var err error
	if r.bufs, err = c.PD.RegisterMR(make([]byte, depth*slot), endpoint.LocalWrite); err != nil {
		return nil, err
	}
	for i := 0; i < depth; i++ {
		if err := r.repost(i); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// repost posts the receive of slot i again.
func (r *fileReceiver) repost(i int) error {
	return r.c.QP.PostRecv(uint64(i), Stream, r.bufs.SGE(uint64(i*r.slot), uint32(r.slot)))
}

// next waits for the next message and returns its bytes and its slot.
func (r *fileReceiver) next() ([]byte, int, error) {
	wc := make([]endpoint.Completion, 1)
	if _, err := r.c.Recv.Wait(r.ctx, wc); err != nil {
		return nil, 0, err
	}
	if wc[0].Status != endpoint.StatusOK {
		return nil, 0, fmt.Errorf("filexfer: receive failed: %v: %v", wc[0].Status, wc[0].Err)
	}
	i := int(wc[0].ID)
	return r.bufs.Bytes()[i*r.slot : i*r.slot+int(wc[0].Bytes)], i, nil
}

// receiveData takes size bytes of data into w, a chunk at a time. A chunk
// that is empty or runs past size breaks the protocol and is refused.
func (r *fileReceiver) receiveData(w io.Writer, size int64, progress func(Progress)) error {
	var got int64
	for got < size {
		b, i, err := r.next()
		if err != nil {
			return err
		}
		if len(b) == 0 || got+int64(len(b)) > size {
			return r.c.refuse(fmt.Errorf("%w: a chunk of %d bytes at byte %d of %d", ErrProtocol, len(b), got, size))
		}
		r.sum.Write(b)
		if _, err := w.Write(b); err != nil {
			return r.c.refuse(fmt.Errorf("filexfer: writing: %w", err))
		}
		got += int64(len(b))
		if err := r.repost(i); err != nil {
			return err
		}
		if progress != nil {
			progress(Progress{got, size})
		}
	}
	return nil
}

// conclude answers the sender with the verdict on the checksums and
// returns the transfer's outcome.
func (r *fileReceiver) conclude(got, sent string) error {
	v := Verdict{OK: sent == got, SHA256: got}
	if !v.OK {
		v.Error = "SHA-256 mismatch"
	}
	if err := r.c.answer(r.ctx, v); err != nil {
		// The data arrived whole and checked. A sender that closes as
		// soon as it reads the verdict can close before the verdict's
		// acknowledgment reaches us, when the CLOSE takes another plane.
		// The verdict's send then fails as flushed, and the transfer still
		// succeeded.
		if !v.OK || !errors.Is(err, endpoint.ErrClosed) {
			return err
		}
	}
	if !v.OK {
		return fmt.Errorf("%w: received %s, the sender says %s", ErrMismatch, got, sent)
	}
	return nil
}
