package filexfer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/mroce/mroce/endpoint"
)

// IDs of the sender's control messages. A data SEND's ID is its slot in
// the buffers, below them.
const (
	headerID  = 1 << 61
	trailerID = 1<<61 + 1
	verdictID = 1 << 62
)

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
	s, err := newFileSender(ctx, c, chunk, depth)
	if err != nil {
		return res, err
	}
	if err := s.sendControl(headerID, 0, res.Header); err != nil {
		return res, err
	}
	if err := s.sendData(r, size, progress); err != nil {
		return res, err
	}
	res.SHA256 = hex.EncodeToString(s.sum.Sum(nil))
	if err := s.sendControl(trailerID, maxControl, Trailer{SHA256: res.SHA256}); err != nil {
		return res, err
	}
	v, err := s.verdict()
	res.Elapsed = time.Since(began)
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

// fileSender is one SendFile's state: its buffers, the slots of them free
// for the next chunk, and the checksum of what it sent.
type fileSender struct {
	ctx        context.Context
	c          Conn
	chunk      int
	bufs       *endpoint.MR // depth slots of chunk bytes
	control    *endpoint.MR // the header, then the trailer
	verdictBuf *endpoint.MR // where the verdict lands
	free       []int
	wcs        []endpoint.Completion
	sum        hash.Hash
}

// newFileSender registers the sender's buffers and posts the receive of
// the verdict before anything is sent, so that the verdict always finds
// it.
func newFileSender(ctx context.Context, c Conn, chunk, depth int) (*fileSender, error) {
	s := &fileSender{ctx: ctx, c: c, chunk: chunk, sum: sha256.New(), wcs: make([]endpoint.Completion, depth+2)}
	var err error
	if s.verdictBuf, err = c.PD.RegisterMR(make([]byte, maxControl), endpoint.LocalWrite); err != nil {
		return nil, err
	}
	if err := c.QP.PostRecv(verdictID, Stream, s.verdictBuf.SGE(0, maxControl)); err != nil {
		return nil, err
	}
	if s.bufs, err = c.PD.RegisterMR(make([]byte, depth*chunk), endpoint.LocalWrite); err != nil {
		return nil, err
	}
	if s.control, err = c.PD.RegisterMR(make([]byte, 2*maxControl), endpoint.LocalWrite); err != nil {
		return nil, err
	}
	s.free = make([]int, 0, depth)
	for i := depth - 1; i >= 0; i-- {
		s.free = append(s.free, i)
	}
	return s, nil
}

// sendControl SENDs v as JSON from the control region at off.
func (s *fileSender) sendControl(id uint64, off int, v any) error {
	b, _ := json.Marshal(v)
	copy(s.control.Bytes()[off:], b)
	return s.c.QP.PostSend(id, Stream, s.control.SGE(uint64(off), uint32(len(b))))
}

// sendData reads size bytes from r and SENDs them a chunk at a time, each
// from a free slot, taking slots back as their SENDs complete.
func (s *fileSender) sendData(r io.Reader, size int64, progress func(Progress)) error {
	var sent int64
	for sent < size {
		for len(s.free) == 0 {
			if err := s.reap(true); err != nil {
				return err
			}
		}
		slot := s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
		n := int(min(int64(s.chunk), size-sent))
		buf := s.bufs.Bytes()[slot*s.chunk : slot*s.chunk+n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("filexfer: reading the data at byte %d: %w", sent, err)
		}
		s.sum.Write(buf)
		if err := s.c.QP.PostSend(uint64(slot), Stream, s.bufs.SGE(uint64(slot*s.chunk), uint32(n))); err != nil {
			return err
		}
		sent += int64(n)
		if progress != nil {
			progress(Progress{sent, size})
		}
		if err := s.reap(false); err != nil {
			return err
		}
	}
	return nil
}

// reap takes the completed SENDs, waiting for one when block is set, and
// frees their slots. A SEND that failed ends the transfer.
func (s *fileSender) reap(block bool) error {
	var k int
	var err error
	if block {
		k, err = s.c.Send.Wait(s.ctx, s.wcs)
	} else {
		k, err = s.c.Send.Poll(s.wcs)
	}
	if err != nil {
		return err
	}
	for _, wc := range s.wcs[:k] {
		if wc.Status != endpoint.StatusOK {
			return fmt.Errorf("filexfer: SEND failed: %v: %v", wc.Status, wc.Err)
		}
		if wc.ID < headerID {
			s.free = append(s.free, int(wc.ID))
		}
	}
	return nil
}

// verdict waits for the receiver's verdict and reads it.
func (s *fileSender) verdict() (Verdict, error) {
	wc := make([]endpoint.Completion, 1)
	if _, err := s.c.Recv.Wait(s.ctx, wc); err != nil {
		return Verdict{}, fmt.Errorf("filexfer: waiting for the receiver's verdict: %w", err)
	}
	if wc[0].Status != endpoint.StatusOK {
		return Verdict{}, fmt.Errorf("filexfer: the verdict: %v: %v", wc[0].Status, wc[0].Err)
	}
	return parseVerdict(s.verdictBuf.Bytes()[:wc[0].Bytes])
}
