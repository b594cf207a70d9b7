package endpoint

import (
	"errors"
	"time"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/pathmgr"
)

// The software backend speaks the engine's types inside and the API's at
// its boundary: these convert one to the other, value by value, so that
// neither side depends on how the other numbers its constants.

func engineOp(o Opcode) engine.Opcode {
	switch o {
	case OpWrite:
		return engine.OpWrite
	case OpWriteImm:
		return engine.OpWriteImm
	case OpSend:
		return engine.OpSend
	case OpRecv:
		return engine.OpRecv
	case OpRead:
		return engine.OpRead
	}
	return 0 // no operation: the engine refuses it
}

func apiOp(o engine.Opcode) Opcode {
	switch o {
	case engine.OpWrite:
		return OpWrite
	case engine.OpWriteImm:
		return OpWriteImm
	case engine.OpSend:
		return OpSend
	case engine.OpRecv:
		return OpRecv
	case engine.OpRead:
		return OpRead
	}
	return 0
}

// statusUnknown is what an engine status this layer does not know
// becomes: not ok, and named by its number.
const statusUnknown Status = 255

func apiStatus(s engine.Status) Status {
	switch s {
	case engine.StatusOK:
		return StatusOK
	case engine.StatusFlushed:
		return StatusFlushed
	case engine.StatusRemoteAccess:
		return StatusRemoteAccess
	case engine.StatusRemoteInvalid:
		return StatusRemoteInvalid
	case engine.StatusTimeout:
		return StatusTimeout
	case engine.StatusLocalLength:
		return StatusLocalLength
	}
	return statusUnknown
}

func engineAccess(a Access) memreg.Access {
	var m memreg.Access
	for _, b := range []struct {
		api Access
		reg memreg.Access
	}{{LocalWrite, memreg.LocalWrite}, {RemoteWrite, memreg.RemoteWrite}, {RemoteRead, memreg.RemoteRead}, {RemoteAtomic, memreg.RemoteAtomic}} {
		if a&b.api != 0 {
			m |= b.reg
		}
	}
	return m
}

func apiConnState(s engine.ConnState) ConnState {
	switch s {
	case engine.Connecting:
		return Connecting
	case engine.Accepting:
		return Accepting
	case engine.Established:
		return Established
	}
	return Closed
}

func apiPathState(s pathmgr.State) PathState {
	switch s {
	case pathmgr.Good:
		return PathGood
	case pathmgr.Skip:
		return PathSkip
	case pathmgr.AssumedBad:
		return PathAssumedBad
	}
	return PathDown
}

func apiCompletion(wc engine.Completion) Completion {
	return Completion{ID: wc.ID, Op: apiOp(wc.Op), Status: apiStatus(wc.Status), Stream: wc.Stream, Bytes: wc.Bytes,
		Imm: wc.Imm, HasImm: wc.HasImm, Solicited: wc.Solicited, Err: apiErr(wc.Err)}
}

func apiPathEvent(ev engine.PathEvent) PathEvent {
	return PathEvent{Path: ev.Path, Plane: ev.Plane, From: apiPathState(ev.From), To: apiPathState(ev.To),
		Repath: ev.Repath, SrcPort: ev.SrcPort, Epoch: ev.Epoch, At: time.Duration(ev.At)}
}

func apiTelemetry(tel []pathmgr.Telemetry) []PathTelemetry {
	out := make([]PathTelemetry, len(tel))
	for i, t := range tel {
		out[i] = PathTelemetry{Path: t.Path, Plane: t.Plane, SrcPort: t.SrcPort, Epoch: t.Epoch, State: apiPathState(t.State),
			RTT:      RTTEstimate{SRTT: t.RTT.SRTT, RTTVar: t.RTT.RTTVar, Min: t.RTT.Min, Samples: t.RTT.Samples},
			InFlight: t.InFlight, Window: t.Window,
			PathCounters: PathCounters{PacketsSent: t.PacketsSent, BytesSent: t.BytesSent, Retransmits: t.Retransmits,
				Lost: t.Lost, Timeouts: t.Timeouts, CEMarks: t.CEMarks, Acked: t.Acked, Repaths: t.Repaths,
				TailProbes: t.TailProbes}}
	}
	return out
}

// engineError is an engine error with the API's meaning added: its
// message is the engine's, and errors.Is finds both.
type engineError struct{ kind, err error }

func (e *engineError) Error() string   { return e.err.Error() }
func (e *engineError) Unwrap() []error { return []error{e.kind, e.err} }

// apiErr gives the engine's connection errors the API's meaning.
func apiErr(err error) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, engine.ErrClosed):
		kind = ErrClosed
	case errors.Is(err, engine.ErrTimeout), errors.Is(err, engine.ErrConnectFailed):
		kind = ErrTimeout
	case errors.Is(err, engine.ErrRefused):
		kind = ErrRefused
	case errors.Is(err, engine.ErrNotReady):
		kind = ErrNotReady
	default:
		return err
	}
	return &engineError{kind, err}
}
