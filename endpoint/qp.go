package endpoint

import (
	"context"
	"fmt"
	"sync"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/pathmgr"
)

// QP is a connection (RDMA's queue pair): many paths below, many ordered
// streams above.
type QP struct {
	pd     *PD
	h      QPHandle
	sendCQ *CQ
	recvCQ *CQ
	mu     sync.Mutex
	state  engine.ConnState
	err    error
}

func (qp *QP) sink(wc Completion) {
	if wc.Op == OpRecv {
		qp.recvCQ.push(wc)
		return
	}
	qp.sendCQ.push(wc)
}

func (qp *QP) onState(s engine.ConnState, err error) {
	qp.mu.Lock()
	qp.state, qp.err = s, err
	qp.mu.Unlock()
}

// State is the connection's state and, once closed, why.
func (qp *QP) State() (engine.ConnState, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state, qp.err
}

// Connect opens a connection to remote and waits until it is established.
// Send completions go to sendCQ, receive completions to recvCQ.
func (pd *PD) Connect(ctx context.Context, remote Remote, sendCQ, recvCQ *CQ) (*QP, error) {
	qp := &QP{pd: pd, sendCQ: sendCQ, recvCQ: recvCQ}
	b := pd.dev.b
	h, err := b.Connect(pd.handle, remote, qp.sink, qp.onState)
	if err != nil {
		return nil, err
	}
	qp.h = h
	if err := b.Progress(ctx, func() bool { s, _ := qp.State(); return s != engine.Connecting }); err != nil {
		return nil, err
	}
	if s, err := qp.State(); s != engine.Established {
		return nil, fmt.Errorf("endpoint: connect: %w", err)
	}
	return qp, nil
}

// Listener accepts connections.
type Listener struct {
	pd             *PD
	sendCQ, recvCQ *CQ
	mu             sync.Mutex
	ready          []*QP
}

// Listen accepts connections on the device; their completions go to the
// given queues.
func (pd *PD) Listen(sendCQ, recvCQ *CQ) (*Listener, error) {
	l := &Listener{pd: pd, sendCQ: sendCQ, recvCQ: recvCQ}
	err := pd.dev.b.Listen(pd.handle, func(h QPHandle) (func(Completion), func(engine.ConnState, error), bool) {
		qp := &QP{pd: pd, h: h, sendCQ: sendCQ, recvCQ: recvCQ, state: engine.Accepting}
		l.mu.Lock()
		l.ready = append(l.ready, qp)
		l.mu.Unlock()
		return qp.sink, qp.onState, true
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

// PostWrite posts an RDMA WRITE of local to (rkey, remoteOffset) on stream.
func (qp *QP) PostWrite(id uint64, stream uint16, local engine.SGE, rkey, remoteOffset uint64) error {
	return qp.PostSendWR(engine.SendWR{ID: id, Op: OpWrite, Stream: stream, Local: local, RKey: rkey, RemoteOffset: remoteOffset})
}

// PostSend posts a SEND of local on stream.
func (qp *QP) PostSend(id uint64, stream uint16, local engine.SGE) error {
	return qp.PostSendWR(engine.SendWR{ID: id, Op: OpSend, Stream: stream, Local: local})
}

// PostSendWR posts any send-side work request.
func (qp *QP) PostSendWR(wr engine.SendWR) error {
	var err error
	qp.pd.dev.b.Do(func() { err = qp.pd.dev.b.PostSend(qp.h, wr) })
	return err
}

// PostRecv posts a receive buffer on a stream.
func (qp *QP) PostRecv(id uint64, stream uint16, local engine.SGE) error {
	var err error
	qp.pd.dev.b.Do(func() { err = qp.pd.dev.b.PostRecv(qp.h, engine.RecvWR{ID: id, Stream: stream, Local: local}) })
	return err
}

// Close closes the connection; outstanding work completes as flushed.
func (qp *QP) Close() error {
	var err error
	qp.pd.dev.b.Do(func() { err = qp.pd.dev.b.Close(qp.h) })
	return err
}

// Telemetry is a snapshot of the connection's paths.
func (qp *QP) Telemetry() []pathmgr.Telemetry {
	var t []pathmgr.Telemetry
	qp.pd.dev.b.Do(func() { t = qp.pd.dev.b.Telemetry(qp.h) })
	return t
}
