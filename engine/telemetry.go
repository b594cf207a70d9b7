// Counters and per-path telemetry (spec section 6.4).

package engine

import (
	"github.com/mroce/mroce/pathmgr"
	"github.com/mroce/mroce/proto"
)

// SenderStats counts a connection's sending.
type SenderStats struct {
	Packets     uint64 // data packets sent, retransmissions included
	Retransmits uint64 // the retransmissions among them, for a gap, timeout, tail probe, retry or copy
	TailProbes  uint64 // the retransmissions among them that were tail probes; a tail probe of new data is not one (spec section 6.6)
	Copies      uint64 // retransmissions sent a second time, on another plane where one has room, at a transfer's tail or for the DSN holding the window
	Timeouts    uint64
	Spurious    uint64 // the Timeouts whose packets an ACK later reported received
	LossRepaths uint64 // paths moved to a new source port because their loss stood out
	PlaneMoves  uint64 // paths moved to another plane: off a failed one, back to their own, or to a shorter one (spec section 6.3)
	// ShorterMoves counts the paths sent to a plane whose round trip was
	// shorter than the one their window's cap held them to (longplane.go).
	ShorterMoves uint64
	Nacks        uint64 // retryable NACKs received
	BadAcks      uint64 // ACKs whose cumulative DSN passed what was sent, and records that named no path or PSN of ours
	BadNacks     uint64 // NACKs that named no transmission in flight, ignored
	// CreditOverdraws counts SENDs and WRITE_IMMs started beyond their
	// stream's receive credit, after waiting a retransmission timeout with
	// nothing in flight (spec section 6.5).
	CreditOverdraws uint64
	MTUProbes       uint64 // padded PROBEs of the path MTU search (spec section 6.7)
	LocalDrops      uint64 // data packets the local host dropped on their way out, resent at once (localdrop.go)
	HostCuts        uint64 // times those drops cut the sending rate
	PlaneCuts       uint64 // times they cut the limit of a plane whose own queue dropped them instead
	// MTUFalls counts sizes a plane had carried and came to refuse: a
	// packet the local host refused as too big, or PROBEs of the size
	// packets are cut to that went unanswered (spec section 6.7). MTUChecks
	// counts those checks, made when a path timed out and then answered an
	// unpadded PROBE.
	MTUFalls  uint64
	MTUChecks uint64
	// Recuts counts DSNs whose content was cut smaller on a resend, the
	// rest going under new DSNs, because the path MTU fell below their
	// packets (spec section 6.7).
	Recuts uint64
}

// ReceiverStats counts a connection's receiving.
type ReceiverStats struct {
	Packets      uint64 // data packets placed
	Bytes        uint64
	CE           uint64
	AcksSent     uint64
	Duplicates   uint64
	OutOfWindow  uint64
	OutOfOrder   uint64 // in baseline mode, PSNs after the expected one, dropped
	Inconsistent uint64 // disagreed with their message's first packet, or a READ_REQ or atomic again
	Atomics      uint64 // FETCH_ADDs and CMP_SWAPs executed, each once (spec section 6.5)
	Overlaps     uint64 // bytes of their message already placed under another DSN
	// Covered counts packets, with RECUT negotiated, whose every byte an
	// earlier packet under another DSN had placed: recorded, not placed
	// (spec section 6.5).
	Covered uint64
	BadPath uint64 // path id beyond the negotiated count, or too long
	Nacks   [16]uint64
}

// EndpointStats counts what the endpoint dropped before any connection saw
// it.
type EndpointStats struct {
	Decode      [proto.NumErrors]uint64 // by proto.Error, steps 1 to 6 of spec section 9
	UnknownConn uint64
	WrongSource uint64 // packets of a connection from an address its peer does not use on that plane
	Quarantined uint64 // packets for a recently closed connection
	Malformed   uint64 // handshake packets out of range, unexpected types
	Refused     uint64 // CONNECTs refused because no one listens, the listener said no, or too many are accepting

	// The authenticated mode (spec section 13). Packets that do not open
	// count in Decode under proto.ErrAuthFailed, and protected packets for
	// no connection with keys under proto.ErrProtected.
	BadHandshakes uint64 // CONNECTs and ACCEPTs whose key exchange did not confirm, or that lacked it
	Unprotected   uint64 // unprotected packets for a connection that takes only protected ones
	Replays       uint64 // control packets opened before, or too old to tell (spec section 13.6)
	PhaseSpent    uint64 // packets not sent: their key phase spent, the next not yet allowed (spec section 13.5)

	// Address validation (spec section 8.1). At the acceptor:
	RetriesSent   uint64 // RETRYs sent, one for each CONNECT without a valid token under pressure (Config.RetryAt)
	BadTokens     uint64 // CONNECTs dropped, unanswered, for a token not made here for their source, id and port
	ExpiredTokens uint64 // CONNECTs whose token was made here but too long ago, taken as carrying none
	// At the initiator:
	RetriesTaken   uint64 // RETRYs answered with a CONNECT carrying their token
	RetriesIgnored uint64 // RETRYs beyond the bound of a connect attempt, or for a connection not in its handshake

	// The receive buffer (localdrop.go): datagrams the port reported lost
	// in it, and the times that lowered the inbound capacity the rate hints
	// share.
	Overflows    uint64
	CapacityCuts uint64
}

// Telemetry returns a snapshot of every path. Like every method of a Conn,
// it runs on the engine's goroutine. It may give the sender its paths (see
// equip).
func (c *Conn) Telemetry() []pathmgr.Telemetry {
	if c.snd.c != nil { // negotiated
		c.snd.equip()
	}
	out := make([]pathmgr.Telemetry, len(c.snd.paths))
	for i, p := range c.snd.paths {
		out[i] = p.Snapshot(p.inflight, p.window)
	}
	return out
}

// SenderStats returns the connection's sending counters.
func (c *Conn) SenderStats() SenderStats { return c.snd.stats }

// ReceiverStats returns the connection's receiving counters.
func (c *Conn) ReceiverStats() ReceiverStats { return c.rcv.stats }

// Stats returns the endpoint's drop counters.
func (e *Endpoint) Stats() EndpointStats { return e.stats }

// Conns is how many connections the endpoint holds, established or in
// their handshake. A closed one is no longer among them; only its id
// stays, quarantined.
func (e *Endpoint) Conns() int { return len(e.conns) }
