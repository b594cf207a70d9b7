package filexfer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
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

// SendFile sends size bytes from r under name and waits for the
// receiver's verdict. If it cannot finish, because the reader fails for
// one, it aborts the connection with the reason's Code so that the
// receiver stops at once and says why.
func SendFile(ctx context.Context, c Conn, r io.Reader, name string, size int64, o Options) (res Result, err error) {
	o = o.withDefaults()
	res = Result{Header: Header{Name: name, Size: size, Chunk: o.Chunk}}
	began := time.Now()
	s, err := newFileSender(ctx, c, o)
	if err != nil {
		return res, c.giveUp(CodeFailed, c.cause("receiver", err))
	}
	defer s.release()
	if err := s.sendControl(headerID, 0, res.Header); err != nil {
		return res, c.giveUp(CodeFailed, s.cause(err))
	}
	if err := s.sendData(r, size); err != nil {
		return res, err
	}
	res.SHA256 = hex.EncodeToString(s.sum.Sum(nil))
	if err := s.sendControl(trailerID, maxControl, Trailer{SHA256: res.SHA256}); err != nil {
		return res, c.giveUp(CodeFailed, s.cause(err))
	}
	v, err := s.verdict()
	res.Elapsed = time.Since(began)
	if err != nil {
		return res, err
	}
	if !v.OK {
		if v.SHA256 != "" && !strings.EqualFold(v.SHA256, res.SHA256) {
			return res, fmt.Errorf("%w: the receiver computed %s, the sender %s (%s)", ErrMismatch, v.SHA256, res.SHA256, v.Error)
		}
		// A receiver that gave up before the trailer, whose verdict came
		// after the last chunk was sent.
		return res, &PeerError{Side: "receiver", Code: cmp.Or(v.Code, CodeRefused), Reason: v.Error}
	}
	return res, nil
}

// fileSender is one SendFile's state: its buffers, the slots of them free
// for the next chunk, and the checksum of what it sent.
type fileSender struct {
	ctx        context.Context
	c          Conn
	o          Options
	bufs       *endpoint.MR // Depth slots of Chunk bytes
	control    *endpoint.MR // the header, then the trailer
	verdictBuf *endpoint.MR // where the verdict lands
	free       []int
	wcs        []endpoint.Completion
	// early is the verdict's completion when reap took it, on a queue
	// shared by sends and receives.
	early *endpoint.Completion
	sum   hash.Hash
}

// newFileSender registers the sender's buffers and posts the receive of
// the verdict before anything is sent, so that the verdict always finds
// it.
func newFileSender(ctx context.Context, c Conn, o Options) (*fileSender, error) {
	s := &fileSender{ctx: ctx, c: c, o: o, sum: sha256.New(), wcs: make([]endpoint.Completion, o.Depth+2)}
	var err error
	if s.verdictBuf, err = c.PD.RegisterMR(make([]byte, maxControl), endpoint.LocalWrite); err != nil {
		return nil, err
	}
	if s.bufs, err = c.PD.RegisterMR(make([]byte, o.Depth*o.Chunk), endpoint.LocalWrite); err != nil {
		s.release()
		return nil, err
	}
	if s.control, err = c.PD.RegisterMR(make([]byte, 2*maxControl), endpoint.LocalWrite); err != nil {
		s.release()
		return nil, err
	}
	if err := c.QP.PostRecv(verdictID, Stream, s.verdictBuf.SGE(0, maxControl)); err != nil {
		s.release()
		return nil, err
	}
	s.free = make([]int, 0, o.Depth)
	for i := o.Depth - 1; i >= 0; i-- {
		s.free = append(s.free, i)
	}
	return s, nil
}

// release deregisters the sender's buffers.
func (s *fileSender) release() {
	for _, mr := range []*endpoint.MR{s.verdictBuf, s.bufs, s.control} {
		if mr != nil {
			mr.Deregister()
		}
	}
}

// sendControl SENDs v as JSON from the control region at off.
func (s *fileSender) sendControl(id uint64, off int, v any) error {
	b, _ := json.Marshal(v)
	copy(s.control.Bytes()[off:], b)
	return s.c.QP.PostSend(id, Stream, s.control.SGE(uint64(off), uint32(len(b))))
}

// sendData reads size bytes from r and SENDs them a chunk at a time, each
// from a free slot, taking slots back as their SENDs complete.
func (s *fileSender) sendData(r io.Reader, size int64) error {
	var sent int64
	for sent < size {
		// A sender that never waits, its slots freed as fast as it fills
		// them, would not see an interrupt otherwise.
		if err := s.ctx.Err(); err != nil {
			return s.c.giveUp(CodeInterrupted, err)
		}
		for len(s.free) == 0 {
			if err := s.reap(true); err != nil {
				return err
			}
		}
		slot := s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
		n := int(min(int64(s.o.Chunk), size-sent))
		buf := s.bufs.Bytes()[slot*s.o.Chunk : slot*s.o.Chunk+n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return s.c.giveUp(CodeRead, fmt.Errorf("filexfer: reading the data at byte %d: %w", sent, err))
		}
		s.sum.Write(buf)
		if err := s.c.QP.PostSend(uint64(slot), Stream, s.bufs.SGE(uint64(slot*s.o.Chunk), uint32(n))); err != nil {
			return s.c.giveUp(CodeFailed, s.cause(err))
		}
		sent += int64(n)
		if s.o.Progress != nil {
			s.o.Progress(Progress{sent, size})
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
		k, err = wait(s.ctx, s.c.Send, s.wcs, s.o.Patience, "free buffer")
	} else {
		k, err = s.c.Send.Poll(s.wcs)
	}
	if err != nil {
		return s.c.giveUp(CodeTimeout, err)
	}
	for _, wc := range s.wcs[:k] {
		if wc.Op == endpoint.OpRecv {
			s.early = &wc
			continue
		}
		if wc.Status != endpoint.StatusOK {
			return s.refused(failed("receiver", wc, "a SEND"))
		}
		if wc.ID < headerID {
			s.free = append(s.free, int(wc.ID))
		}
	}
	return nil
}

// cause is err, or the receiver's abort with its reason when that is what
// ended the connection.
func (s *fileSender) cause(err error) error { return s.refused(s.c.cause("receiver", err)) }

// refused adds the receiver's reason to err when its verdict arrived
// before the connection ended. A receiver that refuses says why in its
// verdict before it aborts.
func (s *fileSender) refused(err error) error {
	var pe *PeerError
	if !errors.As(err, &pe) {
		return err
	}
	wc := make([]endpoint.Completion, 1)
	for s.early == nil {
		if k, _ := s.c.Recv.Poll(wc); k == 0 {
			return err
		}
		if wc[0].Op == endpoint.OpRecv {
			s.early = &wc[0]
		}
	}
	if s.early.Status == endpoint.StatusOK {
		if v, verr := parseVerdict(s.verdictBuf.Bytes()[:s.early.Bytes]); verr == nil {
			pe.Reason = v.Error
			pe.Code = cmp.Or(v.Code, pe.Code)
		}
	}
	return err
}

// verdict waits for the receiver's verdict and reads it.
func (s *fileSender) verdict() (Verdict, error) {
	wc := make([]endpoint.Completion, 1)
	for s.early == nil {
		if _, err := wait(s.ctx, s.c.Recv, wc, s.o.Patience, "verdict"); err != nil {
			return Verdict{}, s.c.giveUp(CodeTimeout, fmt.Errorf("filexfer: waiting for the receiver's verdict: %w", err))
		}
		// A SEND's completion, on a queue shared by sends and receives, is
		// passed over.
		if wc[0].Op == endpoint.OpRecv {
			s.early = &wc[0]
		}
	}
	if s.early.Status != endpoint.StatusOK {
		return Verdict{}, failed("receiver", *s.early, "the verdict")
	}
	v, err := parseVerdict(s.verdictBuf.Bytes()[:s.early.Bytes])
	if err != nil {
		return v, s.c.giveUp(CodeProtocol, err)
	}
	return v, nil
}
