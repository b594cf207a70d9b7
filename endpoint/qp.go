package endpoint

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// QPOptions are a connection's settings beyond the backend's defaults.
type QPOptions struct {
	// SRQ, when set, is where the connection takes its receives; on a
	// listener, where every connection it accepts does.
	SRQ *SRQ
	// OwnCQs, on a listener, gives each connection it accepts a send and a
	// receive queue of its own, this deep, in place of the listener's
	// (QP.SendCQ, QP.RecvCQ): what a server that serves each connection on
	// its own goroutine wants. A connection's queues are fixed when it is
	// made, before anything can complete on it.
	OwnCQs int
}

// srq is the backend's handle of the shared receive queue, or nil.
func (o QPOptions) srq() SRQHandle {
	if o.SRQ == nil {
		return nil
	}
	return o.SRQ.h
}

// QP is a connection (RDMA's queue pair): many paths below, many ordered
// streams above.
type QP struct {
	pd     *PD
	h      QPHandle
	sendCQ *CQ
	recvCQ *CQ
	mu     sync.Mutex
	state  ConnState
	err    error
	paths  []PathEvent
}

// SendCQ is the queue the connection's send completions go to.
func (qp *QP) SendCQ() *CQ { return qp.sendCQ }

// RecvCQ is the queue the connection's receive completions go to.
func (qp *QP) RecvCQ() *CQ { return qp.recvCQ }

// State is the connection's state and, once closed, why.
func (qp *QP) State() (ConnState, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state, qp.err
}

// sink is the QP as its backend's Sink. Its methods are not the QP's: what
// a connection reports is the backend's to say, not the application's.
type sink QP

func (s *sink) Completion(wc Completion) {
	cq := s.sendCQ
	if wc.Op == OpRecv {
		cq = s.recvCQ
	}
	cq.push(wc)
}

func (s *sink) State(st ConnState, err error) {
	s.mu.Lock()
	s.state, s.err = st, err
	s.mu.Unlock()
}

func (s *sink) Path(ev PathEvent) {
	s.mu.Lock()
	s.paths = append(s.paths, ev)
	s.mu.Unlock()
}

// PathEvents returns the path events since the last call: state changes
// and repaths.
func (qp *QP) PathEvents() []PathEvent {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	ev := qp.paths
	qp.paths = nil
	return ev
}

// Connect opens a connection to remote and waits until it is established.
// Send completions go to sendCQ, receive completions to recvCQ.
func (pd *PD) Connect(ctx context.Context, remote Remote, sendCQ, recvCQ *CQ, opts QPOptions) (*QP, error) {
	switch {
	case opts.OwnCQs != 0:
		return nil, errors.New("endpoint: OwnCQs is a listener's option: a connecting side names its queues")
	case sendCQ == nil || recvCQ == nil:
		return nil, errors.New("endpoint: a connection needs a send and a receive completion queue")
	}
	qp := &QP{pd: pd, sendCQ: sendCQ, recvCQ: recvCQ}
	b := pd.dev.b
	h, err := b.Connect(pd.h, remote, opts.srq(), (*sink)(qp))
	if err != nil {
		return nil, err
	}
	qp.h = h
	if err := b.Progress(ctx, func() bool { s, _ := qp.State(); return s != Connecting }); err != nil {
		return nil, err
	}
	if s, err := qp.State(); s != Established {
		return nil, fmt.Errorf("endpoint: connect: %w", err)
	}
	return qp, nil
}

// Listener accepts connections.
type Listener struct {
	pd    *PD
	mu    sync.Mutex
	ready []*QP
}

// Listen accepts connections on the device; their completions go to the
// given queues, or to queues of their own with opts.OwnCQs, and their
// receives come from opts.SRQ when set.
func (pd *PD) Listen(sendCQ, recvCQ *CQ, opts QPOptions) (*Listener, error) {
	switch {
	case opts.OwnCQs < 0:
		return nil, fmt.Errorf("endpoint: OwnCQs %d: want a depth, or 0 for the listener's queues", opts.OwnCQs)
	case opts.OwnCQs == 0 && (sendCQ == nil || recvCQ == nil):
		return nil, errors.New("endpoint: a listener needs a send and a receive completion queue, or OwnCQs")
	}
	l := &Listener{pd: pd}
	err := pd.dev.b.Listen(pd.h, opts.srq(), func(h QPHandle) (Sink, bool) {
		qp := &QP{pd: pd, h: h, sendCQ: sendCQ, recvCQ: recvCQ, state: Accepting}
		if opts.OwnCQs > 0 {
			qp.sendCQ, qp.recvCQ = pd.dev.CreateCQ(opts.OwnCQs), pd.dev.CreateCQ(opts.OwnCQs)
		}
		l.mu.Lock()
		l.ready = append(l.ready, qp)
		l.mu.Unlock()
		return (*sink)(qp), true
	})
	return l, err
}

// Accept returns the next connection that arrived (it may still be
// completing its handshake; receives may be posted at once).
func (l *Listener) Accept(ctx context.Context) (*QP, error) {
	var qp *QP
	err := l.pd.dev.b.Progress(ctx, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.ready) > 0 {
			qp, l.ready = l.ready[0], l.ready[1:]
			return true
		}
		return false
	})
	return qp, err
}

// WaitEstablished waits until the connection is established: an accepted
// connection takes receives at once, but it sends only once its handshake
// is complete (the peer's third message or first packet), which an
// acceptor that speaks first waits for here.
func (qp *QP) WaitEstablished(ctx context.Context) error {
	if err := qp.pd.dev.b.Progress(ctx, func() bool {
		s, _ := qp.State()
		return s != Connecting && s != Accepting
	}); err != nil {
		return err
	}
	if s, err := qp.State(); s != Established {
		return fmt.Errorf("endpoint: %v: %w", s, err)
	}
	return nil
}

// Post posts any send-side work request.
func (qp *QP) Post(wr SendWR) error { return qp.pd.dev.b.PostSend(qp.h, wr) }

// PostWrite posts an RDMA WRITE of local to (rkey, remoteOffset) on stream.
func (qp *QP) PostWrite(id uint64, stream uint16, local SGE, rkey, remoteOffset uint64) error {
	return qp.Post(SendWR{ID: id, Op: OpWrite, Stream: stream, SGL: []SGE{local}, RKey: rkey, RemoteOffset: remoteOffset})
}

// PostRead posts an RDMA READ of the peer's (rkey, remoteOffset) into local.
func (qp *QP) PostRead(id uint64, stream uint16, local SGE, rkey, remoteOffset uint64) error {
	return qp.Post(SendWR{ID: id, Op: OpRead, Stream: stream, SGL: []SGE{local}, RKey: rkey, RemoteOffset: remoteOffset})
}

// PostSend posts a SEND of local on stream.
func (qp *QP) PostSend(id uint64, stream uint16, local SGE) error {
	return qp.Post(SendWR{ID: id, Op: OpSend, Stream: stream, SGL: []SGE{local}})
}

// PostRecv posts a receive on a stream.
func (qp *QP) PostRecv(id uint64, stream uint16, sgl ...SGE) error {
	return qp.pd.dev.b.PostRecv(qp.h, RecvWR{ID: id, Stream: stream, SGL: sgl})
}

// Close closes the connection; outstanding work completes as flushed.
func (qp *QP) Close() error { return qp.pd.dev.b.CloseQP(qp.h) }

// Telemetry is a snapshot of the connection's paths.
func (qp *QP) Telemetry() []PathTelemetry { return qp.pd.dev.b.Telemetry(qp.h) }
