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

func (s *Software) Caps() Caps {
	cfg := s.ep.Config()
	return Caps{Name: "mroce software engine", MaxPaths: cfg.Paths, MaxStreams: cfg.Streams,
		MaxPacket: cfg.MaxPacket, Planes: len(cfg.Planes)}
}

func (s *Software) NewDomain() (any, error) { return s.reg.NewDomain(), nil }

func (s *Software) Register(domain any, buf []byte, access Access) (*memreg.Region, error) {
	return domain.(*memreg.Domain).Register(buf, access)
}

func (s *Software) Deregister(r *memreg.Region) error { return r.Deregister() }

// events adapts a QP's sinks to engine.Events.
type events struct {
	sink  func(Completion)
	state func(engine.ConnState, error)
}

func (e *events) Completion(_ *engine.Conn, wc engine.Completion) { e.sink(wc) }
func (e *events) State(_ *engine.Conn, st engine.ConnState, err error) {
	if e.state != nil {
		e.state(st, err)
	}
}

func (s *Software) Connect(domain any, remote Remote, sink func(Completion), state func(engine.ConnState, error)) (QPHandle, error) {
	var c *engine.Conn
	var err error
	s.runner.Do(func() {
		c, err = s.ep.Connect(remote.Planes, remote.Port, domain.(*memreg.Domain), &events{sink, state})
	})
	return c, err
}

func (s *Software) Listen(domain any, accept func(QPHandle) (func(Completion), func(engine.ConnState, error), bool)) error {
	s.runner.Do(func() {
		s.ep.Listen(domain.(*memreg.Domain), func(c *engine.Conn) (engine.Events, bool) {
			sink, state, ok := accept(c)
			if !ok {
				return nil, false
			}
			return &events{sink, state}, true
		})
	})
	return nil
}

func conn(qp QPHandle) *engine.Conn { return qp.(*engine.Conn) }

func (s *Software) PostSend(qp QPHandle, wr engine.SendWR) error { return conn(qp).Post(wr) }
func (s *Software) PostRecv(qp QPHandle, wr engine.RecvWR) error { return conn(qp).PostRecv(wr) }
func (s *Software) Close(qp QPHandle) error                      { conn(qp).Close(); return nil }
func (s *Software) Telemetry(qp QPHandle) []pathmgr.Telemetry    { return conn(qp).Telemetry() }

func (s *Software) Progress(ctx context.Context, cond func() bool) error {
	return s.runner.Progress(ctx, cond)
}

func (s *Software) Do(f func()) { s.runner.Do(f) }

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
