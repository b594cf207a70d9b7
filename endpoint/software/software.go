// Package software is the backend of the verbs API that runs mroce's own
// protocol engine. It also wires the engine into hosts, on a SimNetwork
// in virtual time or on real UDP sockets with OpenUDP. It converts between
// the engine's types and the API's at its boundary, so the API package
// knows nothing of the engine.
package software

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/pathmgr"
)

// Software is the backend that runs mroce's own protocol engine.
type Software struct {
	ep        *engine.Endpoint
	reg       *memreg.Registry
	runner    Runner
	listening *listening   // the endpoint's listener; the engine's goroutine only
	timers    atomic.Int64 // AfterFunc's timers armed and not yet fired or stopped
}

// NewSoftware makes a software backend from an engine endpoint, the
// registry its regions live in, and its runner.
func NewSoftware(ep *engine.Endpoint, reg *memreg.Registry, r Runner) *Software {
	return &Software{ep: ep, reg: reg, runner: r}
}

// NewRegistry makes the registry of a software backend, its keys drawn
// from random, or from crypto/rand when random is nil.
func NewRegistry(random io.Reader) *memreg.Registry { return memreg.NewRegistry(random) }

// Endpoint is the engine under the backend.
func (s *Software) Endpoint() *engine.Endpoint { return s.ep }

// Registry is where the backend's regions and keys live.
func (s *Software) Registry() *memreg.Registry { return s.reg }

// Runner is the backend's runner, which reaches the engine's goroutine.
func (s *Software) Runner() Runner { return s.runner }

var _ endpoint.Backend = (*Software)(nil)

// Caps reports the engine's configured limits.
func (s *Software) Caps() endpoint.Caps {
	cfg := s.ep.Config()
	return endpoint.Caps{Name: "mroce software engine", MaxPaths: cfg.Paths, MaxStreams: cfg.Streams,
		MaxPacket: cfg.MaxPacket, Planes: len(cfg.Planes)}
}

// errForeign is a handle that another backend made.
var errForeign = errors.New("software: a handle of another backend")

func domain(pd endpoint.PDHandle) (*memreg.Domain, error) {
	d, ok := pd.(*memreg.Domain)
	if !ok || d == nil {
		return nil, fmt.Errorf("protection domain: %w", errForeign)
	}
	return d, nil
}

func conn(qp endpoint.QPHandle) (*engine.Conn, error) {
	c, ok := qp.(*engine.Conn)
	if !ok || c == nil {
		return nil, fmt.Errorf("connection: %w", errForeign)
	}
	return c, nil
}

// srq is a shared receive queue handle, or nil for none.
func srq(h endpoint.SRQHandle) (*engine.SRQ, error) {
	if h == nil {
		return nil, nil
	}
	q, ok := h.(*engine.SRQ)
	if !ok || q == nil {
		return nil, fmt.Errorf("shared receive queue: %w", errForeign)
	}
	return q, nil
}

// AllocPD makes a protection domain in the registry.
func (s *Software) AllocPD() (endpoint.PDHandle, error) { return s.reg.NewDomain(), nil }

// DeallocPD frees a protection domain. A memreg domain holds nothing but
// its regions, which the API has deregistered by now.
func (s *Software) DeallocPD(pd endpoint.PDHandle) error {
	_, err := domain(pd)
	return err
}

// RegisterMR registers buf in the domain under a fresh key.
func (s *Software) RegisterMR(pd endpoint.PDHandle, buf []byte, access endpoint.Access) (endpoint.MRHandle, error) {
	d, err := domain(pd)
	if err != nil {
		return nil, err
	}
	return d.Register(buf, engineAccess(access))
}

// RegisterQPMR registers buf through the connection's scope, so that its
// key reaches it on that connection alone.
func (s *Software) RegisterQPMR(qp endpoint.QPHandle, buf []byte, access endpoint.Access) (endpoint.MRHandle, error) {
	c, err := conn(qp)
	if err != nil {
		return nil, err
	}
	return c.Scope().Register(buf, engineAccess(access))
}

// DeregisterMR revokes the region's key, for packets already in flight
// too, and waits for placements in progress, as memreg.Region.Deregister
// does.
func (s *Software) DeregisterMR(mr endpoint.MRHandle) error {
	g, ok := mr.(*memreg.Region)
	if !ok || g == nil {
		return fmt.Errorf("memory region: %w", errForeign)
	}
	return g.Deregister()
}

// CreateSRQ makes a shared receive queue of the domain.
func (s *Software) CreateSRQ(pd endpoint.PDHandle) (endpoint.SRQHandle, error) {
	d, err := domain(pd)
	if err != nil {
		return nil, err
	}
	var q *engine.SRQ
	if err := s.runner.Do(func() { q = s.ep.NewSRQ(d) }); err != nil {
		return nil, err
	}
	return q, nil
}

// PostSRQRecv adds a receive to a shared queue.
func (s *Software) PostSRQRecv(h endpoint.SRQHandle, wr endpoint.RecvWR) error {
	q, err := srq(h)
	if err == nil && q == nil {
		err = fmt.Errorf("shared receive queue: %w", errForeign)
	}
	if err != nil {
		return err
	}
	list, err := engineSGL(wr.SGL)
	if err != nil {
		return err
	}
	if derr := s.runner.Do(func() { err = q.PostRecv(engine.RecvWR{ID: wr.ID, SGL: list}) }); derr != nil {
		return derr
	}
	return err
}

// DestroySRQ frees a shared receive queue. The engine's queue is memory
// only. The receives in it stay with the connections that use it until
// they close, and the API posts no more.
func (s *Software) DestroySRQ(h endpoint.SRQHandle) error {
	_, err := srq(h)
	return err
}

// events adapts a Sink to engine.Events and engine.PathObserver.
type events struct{ sink endpoint.Sink }

func (e events) Completion(_ *engine.Conn, wc engine.Completion) {
	e.sink.Completion(apiCompletion(wc))
}
func (e events) State(_ *engine.Conn, st engine.ConnState, err error) {
	e.sink.State(apiConnState(st), apiErr(err))
}
func (e events) PathChanged(_ *engine.Conn, ev engine.PathEvent) { e.sink.Path(apiPathEvent(ev)) }

// Connect starts a connection's handshake; it takes its receives from
// the shared queue when one is given.
func (s *Software) Connect(pd endpoint.PDHandle, remote endpoint.Remote, sh endpoint.SRQHandle, sink endpoint.Sink) (endpoint.QPHandle, error) {
	d, err := domain(pd)
	if err != nil {
		return nil, err
	}
	q, err := srq(sh)
	if err != nil {
		return nil, err
	}
	var c *engine.Conn
	derr := s.runner.Do(func() {
		c, err = s.ep.Connect(remote.Planes, remote.Port, d, events{sink})
		if err == nil && q != nil {
			if err = c.UseSRQ(q); err != nil {
				c.Close()
			}
		}
	})
	if derr != nil {
		return nil, derr
	}
	if err != nil {
		return nil, apiErr(err)
	}
	return c, nil
}

// listening is a listener's handle. The engine has one listener per
// endpoint, and a later Listen takes over from an earlier one.
type listening struct {
	pd *memreg.Domain // not empty, so that distinct listeners have distinct addresses
}

// Listen accepts connections into the domain; each takes its receives
// from the shared queue when one is given.
func (s *Software) Listen(pd endpoint.PDHandle, sh endpoint.SRQHandle, accept func(endpoint.QPHandle) (endpoint.Sink, bool)) (endpoint.ListenerHandle, error) {
	d, err := domain(pd)
	if err != nil {
		return nil, err
	}
	q, err := srq(sh)
	if err != nil {
		return nil, err
	}
	l := &listening{pd: d}
	return l, s.runner.Do(func() {
		s.listening = l
		s.ep.Listen(d, func(c *engine.Conn) (engine.Events, bool) {
			if q != nil && c.UseSRQ(q) != nil {
				return nil, false
			}
			sink, ok := accept(c)
			if !ok {
				return nil, false
			}
			return events{sink}, true
		})
	})
}

// CloseListener stops accepting, if the listener is still the endpoint's.
// CONNECTs are refused from then on, by docs/spec.md section 8.4.
func (s *Software) CloseListener(h endpoint.ListenerHandle) error {
	l, ok := h.(*listening)
	if !ok || l == nil {
		return fmt.Errorf("listener: %w", errForeign)
	}
	s.runner.Do(func() {
		if s.listening == l {
			s.ep.Listen(nil, nil)
			s.listening = nil
		}
	})
	return nil // a stopped engine accepts nothing
}

// engineSGL turns the API's buffers into the engine's.
func engineSGL(list []endpoint.SGE) ([]engine.SGE, error) {
	out := make([]engine.SGE, len(list))
	for i, e := range list {
		if e.MR == nil {
			return nil, fmt.Errorf("software: buffer %d has no registered region", i)
		}
		g, ok := e.MR.Handle().(*memreg.Region)
		if !ok || g == nil {
			return nil, fmt.Errorf("buffer %d: %w", i, errForeign)
		}
		out[i] = engine.SGE{Region: g, Offset: e.Offset, Length: e.Length}
	}
	return out, nil
}

// PostSend hands a send-side work request to the engine.
func (s *Software) PostSend(qp endpoint.QPHandle, wr endpoint.SendWR) error {
	c, err := conn(qp)
	if err != nil {
		return err
	}
	list, err := engineSGL(wr.SGL)
	if err != nil {
		return err
	}
	ewr := engine.SendWR{ID: wr.ID, Op: engineOp(wr.Op), Stream: wr.Stream, SGL: list, RKey: wr.RKey,
		RemoteOffset: wr.RemoteOffset, Imm: wr.Imm, Solicited: wr.Solicited, Unsignaled: wr.Unsignaled,
		Add: wr.Add, Compare: wr.Compare, Swap: wr.Swap}
	if derr := s.runner.Do(func() { err = c.Post(ewr) }); derr != nil {
		return derr
	}
	return apiErr(err)
}

// PostRecv hands a receive to the engine.
func (s *Software) PostRecv(qp endpoint.QPHandle, wr endpoint.RecvWR) error {
	c, err := conn(qp)
	if err != nil {
		return err
	}
	list, err := engineSGL(wr.SGL)
	if err != nil {
		return err
	}
	if derr := s.runner.Do(func() { err = c.PostRecv(engine.RecvWR{ID: wr.ID, Stream: wr.Stream, SGL: list}) }); derr != nil {
		return derr
	}
	return apiErr(err)
}

// CloseQP closes the connection. It sends CLOSE to the peer and flushes
// outstanding work, by docs/spec.md section 8.5.
func (s *Software) CloseQP(qp endpoint.QPHandle) error {
	return s.end(qp, (*engine.Conn).Close)
}

// AbortQP ends the connection at once and tells the peer code in a CLOSE
// APPLICATION, by docs/spec.md section 8.5.
func (s *Software) AbortQP(qp endpoint.QPHandle, code uint32) error {
	return s.end(qp, func(c *engine.Conn) { c.Abort(code) })
}

// end ends the connection qp on the engine's loop, the way given.
func (s *Software) end(qp endpoint.QPHandle, how func(*engine.Conn)) error {
	c, err := conn(qp)
	if err != nil {
		return err
	}
	s.runner.Do(func() { how(c) })
	return nil // a stopped engine's connections ended with it
}

// Params reads what the connection's handshake settled.
func (s *Software) Params(qp endpoint.QPHandle) endpoint.ConnParams {
	c, err := conn(qp)
	if err != nil {
		return endpoint.ConnParams{}
	}
	var p endpoint.ConnParams
	s.runner.Do(func() {
		p = endpoint.ConnParams{Paths: c.Paths(), Streams: c.Streams(), MaxPacket: c.MaxPacket(), PathMTUDone: true, Atomics: c.Atomics()}
		p.Local.ConnID, p.Peer.ConnID = c.ID(), c.PeerID()
		p.Local.InitialPSN, p.Local.InitialDSN = c.Initial()
		p.Peer.InitialPSN, p.Peer.InitialDSN = c.PeerInitial()
		for _, m := range c.PathMTU() {
			p.PathMTU = append(p.PathMTU, m.Size)
			p.PathMTUDone = p.PathMTUDone && m.Done
		}
	})
	return p
}

// Telemetry reads the connection's paths.
func (s *Software) Telemetry(qp endpoint.QPHandle) []endpoint.PathTelemetry {
	c, err := conn(qp)
	if err != nil {
		return nil
	}
	var t []pathmgr.Telemetry
	s.runner.Do(func() { t = c.Telemetry() })
	return apiTelemetry(t)
}

// Received reads the connection's receive side counters.
func (s *Software) Received(qp endpoint.QPHandle) endpoint.ReceiveCounters {
	c, err := conn(qp)
	if err != nil {
		return endpoint.ReceiveCounters{}
	}
	var st engine.ReceiverStats
	s.runner.Do(func() { st = c.ReceiverStats() })
	rc := endpoint.ReceiveCounters{Packets: st.Packets, Bytes: st.Bytes, Duplicates: st.Duplicates, OutOfWindow: st.OutOfWindow,
		CEMarks: st.CE, AcksSent: st.AcksSent}
	for _, n := range st.Nacks {
		rc.Nacks += n
	}
	return rc
}

// Progress waits on the runner.
func (s *Software) Progress(ctx context.Context, cond func() bool) error {
	return s.runner.Progress(ctx, cond)
}

// AfterFunc calls f once d has passed on the engine's clock, through the
// runner. Under a SimRunner that is virtual time, and f runs inside a step
// of the simulation, where the backend's calls run in place. Under a
// LoopRunner f runs on a goroutine of its own. A timer armed and not yet
// fired counts as something left to happen (see SimNetwork.Quiet).
func (s *Software) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	s.timers.Add(1)
	var done atomic.Bool
	settle := func() bool {
		if !done.CompareAndSwap(false, true) {
			return false
		}
		s.timers.Add(-1)
		return true
	}
	cancel := s.runner.AfterFunc(d, func() {
		settle()
		f()
	})
	return func() bool { return cancel() && settle() }
}
