package endpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// QPOptions are a connection's settings beyond the backend's defaults.
type QPOptions struct {
	// SRQ, when set, is where the connection takes its receives; on a
	// listener, where every connection it accepts does.
	SRQ *SRQ
	// OwnCQs, on a listener, gives each connection it accepts a send and a
	// receive queue of its own, this deep, in place of the listener's
	// QP.SendCQ and QP.RecvCQ. A server that serves each connection on its
	// own goroutine wants that. A connection's queues are fixed when it is
	// made, before anything can complete on it.
	OwnCQs int
	// Backlog, on a listener, bounds the connections whose handshake has
	// completed and that wait for Accept. A connection that completes its
	// handshake while the queue is full is closed and freed, and a CONNECT
	// that arrives while it is full is refused. 0 means DefaultBacklog.
	Backlog int
	// AcceptTimeout, on a listener, is how long a connection whose
	// handshake has completed waits for Accept. One not accepted by then
	// is closed and freed, so its peer learns that no one will serve it.
	// It runs on the backend's clock, in virtual time under a simulation.
	// 0 means DefaultAcceptTimeout.
	AcceptTimeout time.Duration
}

const (
	// DefaultBacklog is a listener's Backlog unless set. A connection
	// waiting for Accept holds its whole state, every path's and every
	// stream's, some 10 KiB in the software engine at 8 paths, and its
	// peer may already be sending to it. 64 is as many clients as arrive
	// at once at a host in the largest incast and all-to-all the
	// simulations run, for about a MiB. An application that accepts in a
	// loop keeps the queue near empty; one that lets 64 pile up is not
	// keeping up, and a peer refused at once is better off than one left
	// waiting. A server that expects more at once, such as N requesters
	// started together, sets Backlog to N.
	DefaultBacklog = 64
	// DefaultAcceptTimeout is a listener's AcceptTimeout unless set. An
	// application that accepts in a loop takes a connection within
	// microseconds, and one busy between Accepts, such as a server taking
	// its next client once a test ends, within a second or two. A peer
	// whose connection nobody takes learns it within a few of its own
	// handshake timeouts (1 s), instead of never: keep-alives keep an
	// idle connection up, accepted or not.
	DefaultAcceptTimeout = 5 * time.Second
)

// srq is the backend's handle of the shared receive queue, or nil; a
// closed queue is refused.
func (o QPOptions) srq() (SRQHandle, error) {
	if o.SRQ == nil {
		return nil, nil
	}
	if o.SRQ.isClosed() {
		return nil, errSRQClosed
	}
	return o.SRQ.h, nil
}

// QP is a connection, RDMA's queue pair, with many paths below and many
// ordered streams above. Its completion queues are fixed when it is made.
type QP struct {
	pd     *PD
	h      QPHandle
	sendCQ *CQ
	recvCQ *CQ
	mu     sync.Mutex
	state  ConnState
	err    error
	paths  []PathEvent
	closed bool // Close was called
	// lis is the listener a connection arrived on, until it is accepted.
	lis *Listener
	// ownCQs says the listener made sendCQ and recvCQ for this connection.
	ownCQs bool
	// expire stops the deadline of a connection waiting for Accept; the
	// listener's mu guards it.
	expire func() bool
}

// SendCQ is the queue the connection's send completions go to.
func (qp *QP) SendCQ() *CQ { return qp.sendCQ }

// RecvCQ is the queue the connection's receive completions go to.
func (qp *QP) RecvCQ() *CQ { return qp.recvCQ }

// Handle is the backend's handle of the connection, for what a backend
// offers beyond this API.
func (qp *QP) Handle() QPHandle { return qp.h }

// State is the connection's state and, once closed, why.
func (qp *QP) State() (ConnState, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state, qp.err
}

// ClosedNormally reports whether the connection has ended with a CLOSE
// NORMAL, this side's or the peer's (the package's ClosedNormally of what
// State reports).
func (qp *QP) ClosedNormally() bool {
	st, err := qp.State()
	return st == Closed && ClosedNormally(err)
}

// sink is the QP as its backend's Sink. Its methods are not the QP's,
// since what a connection reports is the backend's to say, not the
// application's.
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
	l := s.lis
	s.mu.Unlock()
	if l != nil {
		l.settled((*QP)(s), st)
	}
}

func (s *sink) Path(ev PathEvent) {
	s.mu.Lock()
	s.paths = append(s.paths, ev)
	s.mu.Unlock()
}

// PathEvents returns the path events since the last call, its state
// changes and repaths.
func (qp *QP) PathEvents() []PathEvent {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	ev := qp.paths
	qp.paths = nil
	return ev
}

// Connect opens a connection to remote and waits until it is established.
// Send completions go to sendCQ, receive completions to recvCQ. A
// connection that is not established is closed before Connect returns.
func (pd *PD) Connect(ctx context.Context, remote Remote, sendCQ, recvCQ *CQ, opts QPOptions) (*QP, error) {
	switch {
	case opts.OwnCQs != 0:
		return nil, errors.New("endpoint: OwnCQs is a listener's option: a connecting side names its queues")
	case opts.Backlog != 0 || opts.AcceptTimeout != 0:
		return nil, errors.New("endpoint: Backlog and AcceptTimeout are a listener's options")
	case sendCQ == nil || recvCQ == nil:
		return nil, errors.New("endpoint: a connection needs a send and a receive completion queue")
	case !pd.isOpen():
		return nil, errPDClosed
	}
	srq, err := opts.srq()
	if err != nil {
		return nil, err
	}
	qp := &QP{pd: pd, sendCQ: sendCQ, recvCQ: recvCQ}
	b := pd.dev.b
	h, err := b.Connect(pd.h, remote, srq, (*sink)(qp))
	if err != nil {
		return nil, err
	}
	qp.h = h
	if !pd.adopt(func() { pd.qps[qp] = struct{}{} }) {
		b.CloseQP(h)
		return nil, errPDClosed
	}
	err = b.Progress(ctx, func() bool { s, _ := qp.State(); return s != Connecting })
	if s, serr := qp.State(); err == nil && s != Established {
		err = fmt.Errorf("endpoint: connect: %w", serr)
	}
	if err != nil {
		qp.Close()
		return nil, err
	}
	return qp, nil
}

// Listener accepts connections. A connection is handed out once its
// handshake completes, so that one that never completes, a stray or
// forged CONNECT, is never what Accept returns.
//
// Established connections wait for Accept in a queue of at most Backlog,
// each for at most AcceptTimeout. Past either it is closed and freed, so
// that neither a burst of real peers nor an application that stops
// accepting grows the listener without bound. The bound is the
// listener's own. A half-open handshake is the backend's to bound, as
// the software engine's MaxAccepting does, and it makes nothing here but
// an entry in arriving.
//
// The deadline runs on Backend.AfterFunc, the backend's clock, so it
// runs in virtual time under a simulation like the rest of the backend.
// A Sink call must not call the backend, so the connection the listener
// closes is closed from AfterFunc's f, which may: at once for one that
// overflows the queue, at its deadline for one not accepted. Closing
// tells the peer with a normal CLOSE, as QP.Close does: the transport's
// CLOSE RESOURCE is the engine's to send, and an application's abort
// code would speak for an application that never saw the connection.
type Listener struct {
	pd       *PD
	h        ListenerHandle
	backlog  int
	timeout  time.Duration
	mu       sync.Mutex
	arriving []*QP // handshakes under way
	ready    []*QP // established, not yet accepted, at most backlog
	closed   bool
}

// settled moves a connection that arrived on the listener on: to the
// ready ones once established, with its deadline, or out to be closed
// when they are full; out of the listener once closed.
func (l *Listener) settled(qp *QP, st ConnState) {
	b := l.pd.dev.b
	l.mu.Lock()
	found, full := false, false
	var stop func() bool
	switch st {
	case Established:
		if i := slices.Index(l.arriving, qp); i >= 0 {
			l.arriving = slices.Delete(l.arriving, i, i+1)
			if len(l.ready) < l.backlog {
				l.ready = append(l.ready, qp)
				qp.expire = b.AfterFunc(l.timeout, func() { l.expired(qp) })
			} else {
				full = true
			}
		}
	case Closed:
		if i := slices.Index(l.arriving, qp); i >= 0 {
			l.arriving, found = slices.Delete(l.arriving, i, i+1), true
		}
		if i := slices.Index(l.ready, qp); i >= 0 {
			l.ready, found = slices.Delete(l.ready, i, i+1), true
			stop, qp.expire = qp.expire, nil
		}
	}
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
	if full {
		// A sink must not call the backend; AfterFunc's f may.
		b.AfterFunc(0, func() { discard(qp) })
	}
	if found {
		// Never handed out, so no one else will free it. A sink must not
		// call the backend, and the backend has ended the connection.
		qp.pd.forget(func() { delete(qp.pd.qps, qp) })
		qp.dropOwnCQs()
	}
}

// expired closes a connection that waited for Accept past the deadline,
// unless Accept took it first.
func (l *Listener) expired(qp *QP) {
	l.mu.Lock()
	i := slices.Index(l.ready, qp)
	if i >= 0 {
		l.ready = slices.Delete(l.ready, i, i+1)
	}
	l.mu.Unlock()
	if i >= 0 {
		discard(qp)
	}
}

// discard closes and frees a connection the listener will not hand out.
func discard(qp *QP) {
	qp.Close()
	qp.dropOwnCQs()
}

// dropOwnCQs drops the queues a listener made for a connection it never
// handed out. No one can be waiting on them.
func (qp *QP) dropOwnCQs() {
	if qp.ownCQs {
		qp.sendCQ.drop()
		qp.recvCQ.drop()
	}
}

// Listen accepts connections on the device; their completions go to the
// given queues, or to queues of their own with opts.OwnCQs, and their
// receives come from opts.SRQ when set. At most opts.Backlog wait for
// Accept, each for at most opts.AcceptTimeout.
func (pd *PD) Listen(sendCQ, recvCQ *CQ, opts QPOptions) (*Listener, error) {
	switch {
	case opts.OwnCQs < 0:
		return nil, fmt.Errorf("endpoint: OwnCQs %d: want a depth, or 0 for the listener's queues", opts.OwnCQs)
	case opts.OwnCQs == 0 && (sendCQ == nil || recvCQ == nil):
		return nil, errors.New("endpoint: a listener needs a send and a receive completion queue, or OwnCQs")
	case opts.Backlog < 0:
		return nil, fmt.Errorf("endpoint: Backlog %d: want a bound, or 0 for %d", opts.Backlog, DefaultBacklog)
	case opts.AcceptTimeout < 0:
		return nil, fmt.Errorf("endpoint: AcceptTimeout %v: want a deadline, or 0 for %v", opts.AcceptTimeout, DefaultAcceptTimeout)
	case !pd.isOpen():
		return nil, errPDClosed
	}
	srq, err := opts.srq()
	if err != nil {
		return nil, err
	}
	l := &Listener{pd: pd, backlog: opts.Backlog, timeout: opts.AcceptTimeout}
	if l.backlog == 0 {
		l.backlog = DefaultBacklog
	}
	if l.timeout == 0 {
		l.timeout = DefaultAcceptTimeout
	}
	h, err := pd.dev.b.Listen(pd.h, srq, func(h QPHandle) (Sink, bool) {
		qp := &QP{pd: pd, h: h, sendCQ: sendCQ, recvCQ: recvCQ, state: Accepting, lis: l}
		l.mu.Lock()
		defer l.mu.Unlock()
		// A listener or domain closed while the backend was reaching here
		// refuses the connection, and so does a full queue: the peer
		// learns at once, and nothing is made for it.
		if l.closed || len(l.ready) >= l.backlog || !pd.adopt(func() { pd.qps[qp] = struct{}{} }) {
			return nil, false
		}
		if opts.OwnCQs > 0 {
			qp.sendCQ, qp.recvCQ = pd.dev.CreateCQ(opts.OwnCQs), pd.dev.CreateCQ(opts.OwnCQs)
			qp.ownCQs = true
		}
		l.arriving = append(l.arriving, qp)
		return (*sink)(qp), true
	})
	if err != nil {
		return nil, err
	}
	l.h = h
	if !pd.adopt(func() { pd.lis[l] = struct{}{} }) {
		l.Close()
		return nil, errPDClosed
	}
	return l, nil
}

// Accept returns the next connection whose handshake has completed, in
// the order they completed. One that fails its handshake, or that waited
// past the listener's AcceptTimeout, is never returned.
func (l *Listener) Accept(ctx context.Context) (*QP, error) {
	// The condition only looks: a backend may still evaluate it after
	// Progress has returned for the context, so the connection is taken
	// here, on the caller's goroutine.
	err := l.pd.dev.b.Progress(ctx, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.closed || len(l.ready) > 0
	})
	l.mu.Lock()
	var qp *QP
	var stop func() bool
	if len(l.ready) > 0 {
		qp, stop = l.ready[0], l.ready[0].expire
		l.ready = slices.Delete(l.ready, 0, 1)
		qp.expire = nil
		qp.mu.Lock()
		qp.lis = nil
		qp.mu.Unlock()
	}
	closed := l.closed
	l.mu.Unlock()
	if stop != nil {
		stop() // should it fire all the same, it no longer finds the connection
	}
	switch {
	case qp != nil:
		return qp, nil // taken, so accepted, whatever ended the wait meanwhile
	case closed:
		return nil, errListenerClosed
	}
	return nil, err
}

// Close stops accepting. Connections that arrived and were not accepted
// are closed and freed, and those accepted are not.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	waiting := append(l.arriving, l.ready...)
	var stops []func() bool
	for _, qp := range l.ready {
		stops = append(stops, qp.expire)
		qp.expire = nil
	}
	l.arriving, l.ready = nil, nil
	l.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	err := l.pd.dev.b.CloseListener(l.h)
	for _, qp := range waiting {
		discard(qp)
	}
	l.pd.forget(func() { delete(l.pd.lis, l) })
	return err
}

// WaitEstablished waits until the connection is established. An accepted
// connection takes receives at once, but it sends only once its handshake
// is complete with the peer's third message or first packet. An acceptor
// that speaks first waits for that here.
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

func (qp *QP) isClosed() bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.closed
}

// Post posts any send-side work request.
func (qp *QP) Post(wr SendWR) error {
	if qp.isClosed() {
		return errQPClosed
	}
	if err := checkSGL(wr.SGL); err != nil {
		return err
	}
	return qp.pd.dev.b.PostSend(qp.h, wr)
}

// PostWrite posts an RDMA WRITE of local to rkey at remoteOffset on
// stream.
func (qp *QP) PostWrite(id uint64, stream uint16, local SGE, rkey, remoteOffset uint64) error {
	return qp.Post(SendWR{ID: id, Op: OpWrite, Stream: stream, SGL: []SGE{local}, RKey: rkey, RemoteOffset: remoteOffset})
}

// PostRead posts an RDMA READ of the peer's rkey at remoteOffset into
// local.
func (qp *QP) PostRead(id uint64, stream uint16, local SGE, rkey, remoteOffset uint64) error {
	return qp.Post(SendWR{ID: id, Op: OpRead, Stream: stream, SGL: []SGE{local}, RKey: rkey, RemoteOffset: remoteOffset})
}

// PostFetchAdd posts an atomic FETCH_ADD of add to the 8 bytes at
// remoteOffset of rkey. Their value before it lands in local, 8 bytes.
func (qp *QP) PostFetchAdd(id uint64, stream uint16, local SGE, rkey, remoteOffset, add uint64) error {
	return qp.Post(SendWR{ID: id, Op: OpFetchAdd, Stream: stream, SGL: []SGE{local}, RKey: rkey, RemoteOffset: remoteOffset, Add: add})
}

// PostCmpSwap posts an atomic CMP_SWAP: the 8 bytes at remoteOffset of
// rkey become swap if they hold compare. Their value before it lands in
// local, 8 bytes.
func (qp *QP) PostCmpSwap(id uint64, stream uint16, local SGE, rkey, remoteOffset, compare, swap uint64) error {
	return qp.Post(SendWR{ID: id, Op: OpCmpSwap, Stream: stream, SGL: []SGE{local}, RKey: rkey, RemoteOffset: remoteOffset,
		Compare: compare, Swap: swap})
}

// PostSend posts a SEND of local on stream.
func (qp *QP) PostSend(id uint64, stream uint16, local SGE) error {
	return qp.Post(SendWR{ID: id, Op: OpSend, Stream: stream, SGL: []SGE{local}})
}

// PostRecv posts a receive on a stream.
func (qp *QP) PostRecv(id uint64, stream uint16, sgl ...SGE) error {
	if qp.isClosed() {
		return errQPClosed
	}
	if err := checkSGL(sgl); err != nil {
		return err
	}
	return qp.pd.dev.b.PostRecv(qp.h, RecvWR{ID: id, Stream: stream, SGL: sgl})
}

// Close closes the connection. Its outstanding work completes as flushed,
// and later posts are refused. A second call, or one after Abort, does
// nothing.
func (qp *QP) Close() error {
	return qp.end(func() error { return qp.pd.dev.b.CloseQP(qp.h) })
}

// Abort ends the connection at once with code, a value of the
// application's own protocol that the peer's connection ends with in an
// *AbortError (docs/spec.md section 8.5, CLOSE APPLICATION). It tells the
// peer why this side gave up. In-flight data is abandoned, outstanding
// work completes as flushed, and later posts are refused. After Close or
// Abort it does nothing.
func (qp *QP) Abort(code uint32) error {
	return qp.end(func() error { return qp.pd.dev.b.AbortQP(qp.h, code) })
}

// end closes the connection once, the backend's way.
func (qp *QP) end(close func() error) error {
	qp.mu.Lock()
	if qp.closed {
		qp.mu.Unlock()
		return nil
	}
	qp.closed = true
	qp.mu.Unlock()
	err := close()
	qp.pd.forget(func() { delete(qp.pd.qps, qp) })
	return err
}

// RegisterMR registers buf with the given access in the connection's
// domain, for this connection alone: a peer reaches it with its key only
// on this connection, and a request naming the key on any other is refused
// as an unknown key is (docs/spec.md section 5.1). A server that gives each
// client a region of its own registers it here, so that no client can
// reach another's. Locally it is a region of the domain like any other.
// It stays registered until Deregister, or the domain's Close, after the
// connection has closed too.
func (qp *QP) RegisterMR(buf []byte, access Access) (*MR, error) {
	if qp.isClosed() {
		return nil, errQPClosed
	}
	if !qp.pd.isOpen() {
		return nil, errPDClosed
	}
	return qp.pd.adoptMR(qp.pd.dev.b.RegisterQPMR(qp.h, buf, access))
}

// Params are what the connection's handshake settled, which may be less
// than this side asked for: the peer's limits count too.
func (qp *QP) Params() ConnParams { return qp.pd.dev.b.Params(qp.h) }

// Telemetry is a snapshot of the connection's paths; of a closed one, its
// last.
func (qp *QP) Telemetry() []PathTelemetry { return qp.pd.dev.b.Telemetry(qp.h) }

// Received reports what the connection's receive side counted: the data
// of the peer's sends, which its paths' telemetry, the sender's, does not
// show.
func (qp *QP) Received() ReceiveCounters { return qp.pd.dev.b.Received(qp.h) }
