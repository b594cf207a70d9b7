package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/mroce/mroce/app/filexfer"
	"github.com/mroce/mroce/endpoint"
)

// Exit statuses of send and recv beyond 0, 1 and 2: they say which side
// failed, so that a script can tell its own side's failure from the
// peer's.
const (
	exitPeerFailed = 3 // the peer gave up and said why
	exitPeerGone   = 4 // the peer is gone, unreachable or silent
	exitMismatch   = 5 // the data arrived but did not verify
)

// interruptedBy is the cause of a context a signal cancelled.
type interruptedBy struct{ sig syscall.Signal }

func (i interruptedBy) Error() string {
	switch i.sig {
	case syscall.SIGINT:
		return "interrupted by SIGINT"
	case syscall.SIGTERM:
		return "interrupted by SIGTERM"
	}
	return "interrupted by " + i.sig.String()
}

// interruptible returns ctx cancelled by the first SIGINT or SIGTERM, with
// the signal as its cause. A second signal has its default effect, so
// that a command that does not stop can still be stopped.
func interruptible(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			cancel(interruptedBy{s.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// startCPUProfile writes a CPU profile to path until stop, when path is
// set.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// statusError is an error the tool prints and exits with status for.
type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// transferStatus gives a send or recv failure its exit status: 128 plus
// the signal for an interrupt, as a shell reports a program a signal
// killed; exitPeerFailed, exitPeerGone or exitMismatch; 1 for a failure of
// this side's own.
func transferStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var sig interruptedBy
	var peer *filexfer.PeerError
	status := 1
	switch {
	case errors.As(context.Cause(ctx), &sig):
		// What the interrupt did to the transfer says nothing more; the
		// peer was told when there was one.
		return &statusError{128 + int(sig.sig), sig}
	case errors.As(err, &peer):
		status = exitPeerFailed
	case errors.Is(err, filexfer.ErrMismatch):
		status = exitMismatch
	case errors.Is(err, endpoint.ErrTimeout), errors.Is(err, endpoint.ErrRefused), errors.Is(err, filexfer.ErrImpatient):
		status = exitPeerGone
	}
	return &statusError{status, err}
}
