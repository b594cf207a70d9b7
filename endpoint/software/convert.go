package software

import (
	"errors"
	"time"

	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/pathmgr"
)

// The software backend speaks the engine's types inside and the API's at
// its boundary. These functions convert one to the other, value by value,
// so that neither side depends on how the other numbers its constants.

func engineOp(o endpoint.Opcode) engine.Opcode {
	switch o {
	case endpoint.OpWrite:
		return engine.OpWrite
	case endpoint.OpWriteImm:
		return engine.OpWriteImm
	case endpoint.OpSend:
		return engine.OpSend
	case endpoint.OpRecv:
		return engine.OpRecv
	case endpoint.OpRead:
		return engine.OpRead
	case endpoint.OpFetchAdd:
		return engine.OpFetchAdd
	case endpoint.OpCmpSwap:
		return engine.OpCmpSwap
	}
	return 0 // no operation, which the engine refuses
}

func apiOp(o engine.Opcode) endpoint.Opcode {
	switch o {
	case engine.OpWrite:
		return endpoint.OpWrite
	case engine.OpWriteImm:
		return endpoint.OpWriteImm
	case engine.OpSend:
		return endpoint.OpSend
	case engine.OpRecv:
		return endpoint.OpRecv
	case engine.OpRead:
		return endpoint.OpRead
	case engine.OpFetchAdd:
		return endpoint.OpFetchAdd
	case engine.OpCmpSwap:
		return endpoint.OpCmpSwap
	}
	return 0
}

// statusUnknown is what an engine status this layer does not know
// becomes. It is not ok, and is named by its number.
const statusUnknown endpoint.Status = 255

func apiStatus(s engine.Status) endpoint.Status {
	switch s {
	case engine.StatusOK:
		return endpoint.StatusOK
	case engine.StatusFlushed:
		return endpoint.StatusFlushed
	case engine.StatusRemoteAccess:
		return endpoint.StatusRemoteAccess
	case engine.StatusRemoteInvalid:
		return endpoint.StatusRemoteInvalid
	case engine.StatusTimeout:
		return endpoint.StatusTimeout
	case engine.StatusLocalLength:
		return endpoint.StatusLocalLength
	}
	return statusUnknown
}

func engineAccess(a endpoint.Access) memreg.Access {
	var m memreg.Access
	for _, b := range []struct {
		api endpoint.Access
		reg memreg.Access
	}{{endpoint.LocalWrite, memreg.LocalWrite}, {endpoint.RemoteWrite, memreg.RemoteWrite}, {endpoint.RemoteRead, memreg.RemoteRead}, {endpoint.RemoteAtomic, memreg.RemoteAtomic}} {
		if a&b.api != 0 {
			m |= b.reg
		}
	}
	return m
}

func apiConnState(s engine.ConnState) endpoint.ConnState {
	switch s {
	case engine.Connecting:
		return endpoint.Connecting
	case engine.Accepting:
		return endpoint.Accepting
	case engine.Established:
		return endpoint.Established
	}
	return endpoint.Closed
}

func apiPathState(s pathmgr.State) endpoint.PathState {
	switch s {
	case pathmgr.Good:
		return endpoint.PathGood
	case pathmgr.Skip:
		return endpoint.PathSkip
	case pathmgr.AssumedBad:
		return endpoint.PathAssumedBad
	}
	return endpoint.PathDown
}

func apiCompletion(wc engine.Completion) endpoint.Completion {
	return endpoint.Completion{ID: wc.ID, Op: apiOp(wc.Op), Status: apiStatus(wc.Status), Stream: wc.Stream, Bytes: wc.Bytes,
		Imm: wc.Imm, HasImm: wc.HasImm, Solicited: wc.Solicited, Err: apiErr(wc.Err)}
}

func apiPathEvent(ev engine.PathEvent) endpoint.PathEvent {
	return endpoint.PathEvent{Path: ev.Path, Plane: ev.Plane, From: apiPathState(ev.From), To: apiPathState(ev.To),
		Repath: ev.Repath, SrcPort: ev.SrcPort, Epoch: ev.Epoch, At: time.Duration(ev.At)}
}

func apiTelemetry(tel []pathmgr.Telemetry) []endpoint.PathTelemetry {
	out := make([]endpoint.PathTelemetry, len(tel))
	for i, t := range tel {
		out[i] = endpoint.PathTelemetry{Path: t.Path, Plane: t.Plane, SrcPort: t.SrcPort, Epoch: t.Epoch, State: apiPathState(t.State),
			RTT:      endpoint.RTTEstimate{SRTT: t.RTT.SRTT, RTTVar: t.RTT.RTTVar, Min: t.RTT.Min, Samples: t.RTT.Samples},
			InFlight: t.InFlight, Window: t.Window,
			PathCounters: endpoint.PathCounters{PacketsSent: t.PacketsSent, BytesSent: t.BytesSent, Retransmits: t.Retransmits,
				Lost: t.Lost, LocalDrops: t.LocalDrops, Timeouts: t.Timeouts, SpuriousTimeouts: t.SpuriousTimeouts, CEMarks: t.CEMarks, Acked: t.Acked, Repaths: t.Repaths,
				TailProbes: t.TailProbes, Copies: t.Copies}}
	}
	return out
}

// engineError is an engine error with the API's meaning added. Its
// message is the engine's, and errors.Is finds both.
type engineError struct{ kind, err error }

func (e *engineError) Error() string   { return e.err.Error() }
func (e *engineError) Unwrap() []error { return []error{e.kind, e.err} }

// apiErr gives the engine's connection errors the API's meaning.
func apiErr(err error) error {
	var kind error
	var abort *engine.AbortError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &abort):
		return &endpoint.AbortError{Code: abort.Code, Remote: abort.Remote}
	case errors.Is(err, engine.ErrClosed):
		kind = endpoint.ErrClosed
	case errors.Is(err, engine.ErrTimeout), errors.Is(err, engine.ErrConnectFailed):
		kind = endpoint.ErrTimeout
	case errors.Is(err, engine.ErrRefused):
		kind = endpoint.ErrRefused
	case errors.Is(err, engine.ErrNotReady):
		kind = endpoint.ErrNotReady
	default:
		return err
	}
	return &engineError{kind, err}
}
