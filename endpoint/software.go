package endpoint

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/pathmgr"
)

// Runner is how the software backend reaches its engine: the goroutine (or
// the simulation) that owns the engine's state.
type Runner interface {
	// Do runs f on the engine's goroutine and waits for it.
	Do(f func())
	// Progress returns once cond holds, or ctx ends. cond runs on the
	// engine's goroutine.
	Progress(ctx context.Context, cond func() bool) error
}

// Software is the backend that runs mroce's own protocol engine.
type Software struct {
	ep     *engine.Endpoint
	reg    *memreg.Registry
	runner Runner
}

// NewSoftware makes a software backend from an engine endpoint, the
// registry its regions live in, and its runner.
func NewSoftware(ep *engine.Endpoint, reg *memreg.Registry, r Runner) *Software {
	return &Software{ep: ep, reg: reg, runner: r}
}

// NewRegistry makes the registry of a software backend: keys from random
// (crypto/rand when nil).
func NewRegistry(random io.Reader) *memreg.Registry { return memreg.NewRegistry(random) }

// Endpoint is the engine under the backend.
func (s *Software) Endpoint() *engine.Endpoint { return s.ep }

// Registry is where the backend's regions and keys live.
func (s *Software) Registry() *memreg.Registry { return s.reg }

func (s *Software) Caps() Caps {
	cfg := s.ep.Config()
	return Caps{Name: "mroce software engine", MaxPaths: cfg.Paths, MaxStreams: cfg.Streams,
		MaxPacket: cfg.MaxPacket, Planes: len(cfg.Planes)}
}

func (s *Software) AllocPD() (PDHandle, error) { return s.reg.NewDomain(), nil }

func (s *Software) RegisterMR(pd PDHandle, buf []byte, access Access) (MRHandle, error) {
	return pd.(*memreg.Domain).Register(buf, engineAccess(access))
}

func (s *Software) DeregisterMR(mr MRHandle) error { return mr.(*memreg.Region).Deregister() }

func (s *Software) CreateSRQ(pd PDHandle) (SRQHandle, error) {
	var q *engine.SRQ
	s.runner.Do(func() { q = s.ep.NewSRQ(pd.(*memreg.Domain)) })
	return q, nil
}

func (s *Software) PostSRQRecv(srq SRQHandle, wr RecvWR) error {
	list, err := engineSGL(wr.SGL)
	if err != nil {
		return err
	}
	s.runner.Do(func() { err = srq.(*engine.SRQ).PostRecv(engine.RecvWR{ID: wr.ID, SGL: list}) })
	return err
}

// events adapts a Sink to engine.Events (and engine.PathObserver).
type events struct{ sink Sink }

func (e events) Completion(_ *engine.Conn, wc engine.Completion) {
	e.sink.Completion(apiCompletion(wc))
}
func (e events) State(_ *engine.Conn, st engine.ConnState, err error) {
	e.sink.State(apiConnState(st), apiErr(err))
}
func (e events) PathChanged(_ *engine.Conn, ev engine.PathEvent) { e.sink.Path(apiPathEvent(ev)) }

func (s *Software) Connect(pd PDHandle, remote Remote, opts QPOptions, sink Sink) (QPHandle, error) {
	var c *engine.Conn
	var err error
	s.runner.Do(func() {
		c, err = s.ep.Connect(remote.Planes, remote.Port, pd.(*memreg.Domain), events{sink})
	})
	return c, apiErr(err)
}

func (s *Software) Listen(pd PDHandle, opts QPOptions, accept func(QPHandle) (Sink, bool)) error {
	var srq *engine.SRQ
	if opts.SRQ != nil {
		srq = opts.SRQ.h.(*engine.SRQ)
	}
	s.runner.Do(func() {
		s.ep.Listen(pd.(*memreg.Domain), func(c *engine.Conn) (engine.Events, bool) {
			sink, ok := accept(c)
			if !ok {
				return nil, false
			}
			if srq != nil {
				if err := c.UseSRQ(srq); err != nil {
					return nil, false
				}
			}
			return events{sink}, true
		})
	})
	return nil
}

// engineSGL turns the API's buffers into the engine's.
func engineSGL(list []SGE) ([]engine.SGE, error) {
	out := make([]engine.SGE, len(list))
	for i, e := range list {
		if e.MR == nil {
			return nil, fmt.Errorf("endpoint: buffer %d has no registered region", i)
		}
		g, ok := e.MR.h.(*memreg.Region)
		if !ok {
			return nil, errors.New("endpoint: a region registered with another backend")
		}
		out[i] = engine.SGE{Region: g, Offset: e.Offset, Length: e.Length}
	}
	return out, nil
}

func conn(qp QPHandle) *engine.Conn { return qp.(*engine.Conn) }

func (s *Software) PostSend(qp QPHandle, wr SendWR) error {
	list, err := engineSGL(wr.SGL)
	if err != nil {
		return err
	}
	ewr := engine.SendWR{ID: wr.ID, Op: engineOp(wr.Op), Stream: wr.Stream, SGL: list, RKey: wr.RKey,
		RemoteOffset: wr.RemoteOffset, Imm: wr.Imm, Solicited: wr.Solicited, Unsignaled: wr.Unsignaled}
	s.runner.Do(func() { err = conn(qp).Post(ewr) })
	return apiErr(err)
}

func (s *Software) PostRecv(qp QPHandle, wr RecvWR) error {
	list, err := engineSGL(wr.SGL)
	if err != nil {
		return err
	}
	s.runner.Do(func() { err = conn(qp).PostRecv(engine.RecvWR{ID: wr.ID, Stream: wr.Stream, SGL: list}) })
	return apiErr(err)
}

func (s *Software) CloseQP(qp QPHandle) error {
	s.runner.Do(func() { conn(qp).Close() })
	return nil
}

func (s *Software) Telemetry(qp QPHandle) []PathTelemetry {
	var t []pathmgr.Telemetry
	s.runner.Do(func() { t = conn(qp).Telemetry() })
	return apiTelemetry(t)
}

func (s *Software) Progress(ctx context.Context, cond func() bool) error {
	return s.runner.Progress(ctx, cond)
}

// ErrStalled is what waiting in virtual time returns when nothing is left
// to happen and the awaited condition still does not hold.
var ErrStalled = errors.New("endpoint: the simulation has nothing left to do and the condition does not hold")

// Stepper is a simulation's event loop: clock.Sim.
type Stepper interface {
	Step() bool
}

// SimRunner runs the engine in virtual time on the caller's goroutine:
// waiting means running the simulation until the condition holds.
type SimRunner struct {
	Sim Stepper
}

func (r SimRunner) Do(f func()) { f() }

func (r SimRunner) Progress(ctx context.Context, cond func() bool) error {
	for i := 0; !cond(); i++ {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("endpoint: %w", err)
			}
		}
		if !r.Sim.Step() {
			return ErrStalled
		}
	}
	return nil
}
