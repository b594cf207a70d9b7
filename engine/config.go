package engine

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/cc"
	"github.com/mroce/mroce/proto"
)

// Config is an endpoint's configuration. Zero fields take the defaults
// documented on each.
type Config struct {
	// Addresses and ports.

	// Planes are the endpoint's local addresses, one per plane, that is per
	// NIC port (spec section 6.1).
	Planes []netip.Addr
	// Port is the UDP port the endpoint receives on, its ReplyPort. Default
	// proto.DefaultPort.
	Port uint16
	// SourcePorts is the pool of local UDP source ports that paths and
	// control packets are sent from. Default 49152-49407.
	SourcePorts []uint16

	// What each connection offers, or accepts, at the handshake (spec
	// section 8.2).

	// Mode is the transport of the connections this endpoint opens. It is
	// proto.ModeMultipath, this spec's, or proto.ModeBaseline, the
	// RoCEv2-like mode of spec section 10 with one path, go-back-N and
	// DCQCN. An acceptor serves either.
	Mode proto.Mode
	// MaxPacket is the largest packet, as a UDP payload, that this endpoint
	// sends or accepts. Default 4,160, which holds 4 KiB of payload in a
	// WRITE.
	MaxPacket int
	// BasePacket, when set below MaxPacket, is the largest packet a
	// connection sends before padded PROBEs show that its planes carry
	// more (spec section 6.7, after RFC 8899's BASE_PLPMTU). Each plane's
	// path MTU is then searched up to the negotiated MaxPacket. Zero, the
	// default, sends packets of MaxPacket from the start and searches
	// nothing, as on a fabric whose MTU is known.
	BasePacket int
	// PathMTURaise is how long after a plane's path MTU search ends below
	// MaxPacket it searches again, for a path that came to carry more
	// (RFC 8899's PMTU_RAISE_TIMER). Default 10 minutes; negative: never.
	PathMTURaise time.Duration
	// Paths and Streams are offered or accepted per connection. Defaults 8
	// and 8.
	Paths, Streams int
	// DSNWindow is the receive window in packets this endpoint offers
	// (spec section 6.5). Default 4,096, 340 µs of 400 Gb/s: under heavy
	// loss a DSN lost several times in a row holds the window's head for a
	// couple of round trips a loss (docs/cc.md, "The DSN window").
	DSNWindow int
	// MaxReadsOut is how many READs and atomics a connection may have
	// outstanding as requester, together, and MaxReadsIn how many it
	// serves at once as responder. Both are negotiated. Defaults 16 and 16,
	// or -1 for none.
	MaxReadsOut, MaxReadsIn int
	// NoCredits leaves the CREDITS capability out of the handshake, so
	// that connections send SENDs without receive credits and learn of a
	// missing receive from an RNR, as before credits (spec section 6.5).
	// For testing a peer without them.
	NoCredits bool
	// NoRecut leaves the RECUT capability out of the handshake, so that a
	// path MTU that falls below packets already sent fails the connection,
	// as with a peer that does not offer it (spec section 6.7). For
	// testing such a peer.
	NoRecut bool
	// NoAtomics leaves the ATOMICS capability out of the handshake: the
	// endpoint neither sends nor serves FETCH_ADD and CMP_SWAP (spec
	// section 5.12), and refuses them with NACK UNSUPPORTED.
	NoAtomics bool

	// Limits on the state an endpoint keeps.

	// MaxSendWindow caps the DSNs a connection keeps in flight, whatever
	// window the peer offers. It bounds the sender's state per connection.
	// Default 4,096.
	MaxSendWindow int
	// MaxAccepting caps the connections in the middle of their handshake,
	// accepted and not yet established. Beyond it CONNECTs are refused with
	// CLOSE RESOURCE. Default 1,024.
	MaxAccepting int
	// RetryAt is how many handshakes half-open put the acceptor under
	// pressure. From there on it validates the address of every new
	// CONNECT first: one without a valid token is answered with a RETRY,
	// which makes no state, and the initiator comes back with the token
	// (spec section 8.1). CONNECTs from forged sources can then hold at
	// most RetryAt handshakes half-open, whatever their rate. Default half
	// of MaxAccepting, at least 1, so that initiators that answer RETRYs
	// have the other half. RetryAlways validates every CONNECT, and
	// RetryNever none, for initiators that do not know RETRY.
	RetryAt int

	// Windows and rates.

	// PathWindow caps the packets in flight per path. Congestion control
	// moves each path's window below it.
	// Default and most 255, what a path's ACK records can name (spec
	// section 5.5).
	PathWindow int
	// InboundCapacity is the rate this endpoint can receive, in bytes of
	// payload a second. The endpoint's rate hints share it among the
	// connections sending to it. 0 means unknown, and then ACKs carry no
	// limit.
	InboundCapacity float64
	// OutboundCapacity is the rate this endpoint's NIC can send, in bytes
	// of payload a second over all its planes. Its connections with data to
	// send share it max-min, each asking for what its windows and its
	// receiver's hint allow. Without it every connection paces on its own.
	// Together they may then ask more of the NIC than it has, which builds
	// a queue at the host's own port that every connection's packets wait
	// in. Known, with PortRates or in their place, it lets the paths'
	// windows fall under one packet (docs/cc.md, "Windows under one
	// packet").
	OutboundCapacity float64
	// PortRates is the rate of each plane's NIC port, in bytes of payload
	// a second, by plane index. Where it is set, new data goes on a plane
	// only while its port has no more than a few packets waiting, so the
	// connections give a slower port less and build no queue in front of
	// it. A plane without a rate here takes new data whenever its paths
	// have room. Where every plane has a rate and they differ, the paths
	// of a new connection beyond its whole rounds over the planes are
	// dealt to the planes in proportion to the rates (dealing.go). The
	// rates also size the first window (FirstWindowBDP), and let the
	// paths' windows fall under one packet (docs/cc.md, "Windows under one
	// packet").
	PortRates []float64
	// HintHorizon turns a sender's declared backlog into its demand, which
	// is backlog / horizon. It is also how long a silent sender keeps its
	// share. Default 20 µs, a few round trips of a data-center fabric.
	HintHorizon time.Duration
	// NoRateHints makes the endpoint send no rate hints. Its ACKs say no
	// limit, and congestion control runs from the sending end only.
	NoRateHints bool
	// NoPacing sends as the windows allow, without spacing packets.
	NoPacing bool
	// Resend is where a lost packet is resent: ResendOtherPath, the
	// default, or ResendSamePath (spec section 6.6 leaves it to the
	// sender).
	Resend ResendPolicy
	// DelayTarget is the queueing delay on the way to the receiver that a
	// path may show before its window is cut, on planes whose queues mark
	// no ECN (cc.DelayParams, docs/cc.md). The target is never below the
	// path's least RTT. Default 25 µs. A negative target takes no delay
	// signal.
	DelayTarget time.Duration
	// FirstWindow sizes a connection's first window: FirstWindowBDP, the
	// default, or FirstWindowFixed (docs/cc.md, the Initial row).
	FirstWindow FirstWindowPolicy

	// Acknowledgment.

	// AckEvery and AckDelay coalesce acknowledgments. An ACK goes after
	// AckEvery data packets, or AckDelay after the first unacknowledged one
	// (spec section 6.6). Defaults 8 and 5 µs.
	AckEvery int
	AckDelay time.Duration

	// Timers.

	// RTOInitial, RTOMin and RTOMax bound the per-path retransmission
	// timeout. Defaults 1 ms, 50 µs and 100 ms. Real sockets want an RTOMin
	// of milliseconds, which survives scheduling and GC pauses.
	RTOInitial, RTOMin, RTOMax time.Duration
	// ProbeMin is the floor of a path's tail-probe timer once the receiver
	// has granted a rate. Without a hint the floor is RTOMin. Default a
	// fifth of RTOMin, 10 µs. A probe declares nothing lost, and a lost
	// last packet that nothing follows waits this long to be found. Real
	// sockets want it at RTOMin, for the same reason as RTOMin.
	ProbeMin time.Duration
	// BadProbeMax bounds how long a path in ASSUMED_BAD waits between
	// probes. Each unanswered probe doubles the wait, from the path's
	// retransmission timeout up to BadProbeMax. The wait is never below
	// that timeout, which a reply needs to come back in. Default 4 RTOMin,
	// 200 µs. A blackholed plane that is repaired then carries data again
	// within BadProbeMax and a round trip, for the cost of a probe per path
	// per interval while it is out.
	BadProbeMax time.Duration
	// NoProgress is how long a connection may go without forward progress
	// while it has work outstanding before it fails, and how long it may
	// hear nothing at all from its peer, busy or idle (spec section 8.6).
	// Default 1 s.
	NoProgress time.Duration
	// KeepAlive is how long a connection hears nothing from its peer
	// before it sends a keep-alive PROBE, and again each KeepAlive after
	// that (spec section 8.6). Default a quarter of NoProgress.
	KeepAlive time.Duration
	// ConnectTimeout bounds the handshake. Default 1 s.
	ConnectTimeout time.Duration
	// MPL is the maximum packet lifetime. A path is repathed at most once
	// per MPL, and a closed connection's id stays quarantined for 2 MPL
	// (spec sections 6.3 and 8.5). Default 100 ms.
	MPL time.Duration

	// Paths.

	// LossOutlierFactor moves a path to a new source port, and so a new
	// route, when its smoothed loss is above 2% and this many times the
	// other paths' average. Default 4. A negative factor never repaths for
	// loss.
	LossOutlierFactor float64

	// Baseline mode.

	// BaselineWindow is the go-back-N window in packets of a baseline
	// connection, fixed before the run. Default 64.
	BaselineWindow int
	// LocalAckTimeout, when set, is a baseline connection's local ACK
	// timeout, fixed as RoCEv2 configures it, at 4.096 µs x 2^n. It uses no
	// RTT estimate and no doubling. Zero, the default, uses the adaptive RTO
	// between RTOMin and RTOMax, which real sockets with unknown delays
	// need.
	LocalAckTimeout time.Duration
	// LineRate is the sending NIC's rate in bytes a second, where DCQCN
	// starts. Default 12.5e9, which is 100 Gb/s.
	LineRate float64

	// Simulation and observation.

	// PlaceholderPayloads is for simulations where the bytes moved do not
	// matter. Data packets keep their full length, so they take as long to
	// cross a link, and they are checked against their regions and
	// receives as always. But nothing copies their payload out of or into
	// memory, and no packet carries a CRC (see proto.Packet.Unsealed and
	// DecodeNoCRC). Every protocol decision is the one real payloads get,
	// as long as nothing corrupts packets in flight, which would go unseen.
	// Both ends must set it, since a peer without it rejects every packet's
	// CRC. Never set it on a real network. The payload would be whatever
	// the buffer last held, and nothing would be checked.
	// software.OpenUDPEngine refuses it.
	PlaceholderPayloads bool
	// Random is the source of connection ids and initial sequence numbers,
	// of the authenticated mode's ephemeral keys, and of memreg keys when
	// the registry is made from this config. Default crypto/rand.
	// Simulations pass a seeded source.
	Random io.Reader
	// Auth, when set, puts every connection of the endpoint in the
	// authenticated mode of spec section 13, with these credentials: its
	// CONNECTs and ACCEPTs carry the key exchange, every later packet is
	// protected, and a peer without the mode is refused. It needs the
	// multipath mode and real payloads.
	Auth *auth.Credentials
	// KeyLog, when set, receives a line for each direction of each
	// authenticated connection with the secret its packets are protected
	// under (spec section 13.7), so that a capture can be read. Whoever
	// holds it can read and forge the connection's packets: tests and
	// debugging only.
	KeyLog io.Writer
	// Tracer, when set, hears of the sender's decisions (see TraceEvent).
	Tracer Tracer
}

// The RetryAt values that do not count handshakes.
const (
	RetryAlways = -1 // validate the address of every CONNECT
	RetryNever  = -2 // validate none: CONNECTs are accepted up to MaxAccepting
)

// ResendPolicy chooses the path a lost packet is resent on.
type ResendPolicy uint8

const (
	// ResendOtherPath resends on the usable path with the shortest
	// smoothed RTT on another plane, or failing that on another path of
	// the same plane. Losses on a plane come together, from a burst on
	// one of its links or a link that fails, and another plane avoids
	// them.
	ResendOtherPath ResendPolicy = iota
	// ResendSamePath resends on the path that lost the packet while it
	// can take one (in service, with room in its window), and on another
	// as ResendOtherPath does when it cannot: MetaRoCE's description, a
	// resend "on the path that lost it".
	ResendSamePath
)

func (r ResendPolicy) String() string {
	switch r {
	case ResendOtherPath:
		return "other"
	case ResendSamePath:
		return "same"
	}
	return fmt.Sprintf("ResendPolicy(%d)", uint8(r))
}

// ParseResendPolicy reads "other" or "same".
func ParseResendPolicy(s string) (ResendPolicy, error) {
	for _, r := range []ResendPolicy{ResendOtherPath, ResendSamePath} {
		if s == r.String() {
			return r, nil
		}
	}
	return 0, fmt.Errorf("engine: resend policy %q: want other or same", s)
}

// FirstWindowPolicy chooses how many packets a connection sends before
// its first ACK.
type FirstWindowPolicy uint8

const (
	// FirstWindowBDP sends one bandwidth-delay product: the handshake's
	// round trip times the rate of the NIC ports the paths leave by
	// (PortRates), shared among the connections the endpoint opened
	// alike, where that is more than FirstWindowFixed's, and for each the
	// packets its receiver may hold the first ACK for (AckEvery, or what
	// arrives in AckDelay where that is fewer). It gains a round trip at
	// the start of each transfer where a BDP is hundreds of packets, and
	// loses the part of the senders' first windows beyond the queue of the
	// bottleneck they share. Without the ports' rates or a measured round
	// trip it is FirstWindowFixed.
	FirstWindowBDP FirstWindowPolicy = iota
	// FirstWindowFixed sends cc.DefaultWindow.Initial packets, however
	// many paths share them.
	FirstWindowFixed
)

func (f FirstWindowPolicy) String() string {
	switch f {
	case FirstWindowBDP:
		return "bdp"
	case FirstWindowFixed:
		return "fixed"
	}
	return fmt.Sprintf("FirstWindowPolicy(%d)", uint8(f))
}

// ParseFirstWindowPolicy reads "bdp" or "fixed".
func ParseFirstWindowPolicy(s string) (FirstWindowPolicy, error) {
	for _, f := range []FirstWindowPolicy{FirstWindowBDP, FirstWindowFixed} {
		if s == f.String() {
			return f, nil
		}
	}
	return 0, fmt.Errorf("engine: first window %q: want bdp or fixed", s)
}

// retryThreshold is how many half-open handshakes make a CONNECT without a
// valid token draw a RETRY.
func (c *Config) retryThreshold() int {
	switch c.RetryAt {
	case RetryAlways:
		return 0
	case RetryNever:
		return math.MaxInt
	}
	return c.RetryAt
}

func (c *Config) fill() error {
	if len(c.Planes) == 0 {
		return errors.New("engine: no local plane addresses")
	}
	if c.Port == 0 {
		c.Port = proto.DefaultPort
	}
	if len(c.SourcePorts) == 0 {
		for p := sourcePortFirst; p < sourcePortFirst+defaultSourcePorts; p++ {
			c.SourcePorts = append(c.SourcePorts, uint16(p))
		}
	}
	setInt(&c.MaxPacket, defaultMaxPacket)
	setInt(&c.Paths, defaultPaths)
	setInt(&c.Streams, defaultStreams)
	setInt(&c.DSNWindow, defaultDSNWindow)
	setInt(&c.PathWindow, defaultPathWindow)
	setDur(&c.HintHorizon, defaultHintHorizon)
	setInt(&c.AckEvery, defaultAckEvery)
	setDur(&c.AckDelay, defaultAckDelay)
	setDur(&c.DelayTarget, cc.DefaultDelay.Target)
	setDur(&c.RTOInitial, defaultRTOInitial)
	setDur(&c.RTOMin, defaultRTOMin)
	setDur(&c.RTOMax, defaultRTOMax)
	setDur(&c.ProbeMin, c.RTOMin/5)
	setDur(&c.BadProbeMax, 4*c.RTOMin)
	setDur(&c.NoProgress, defaultNoProgress)
	setDur(&c.KeepAlive, c.NoProgress/4)
	setDur(&c.ConnectTimeout, defaultConnectTimeout)
	setDur(&c.MPL, defaultMPL)
	setDur(&c.PathMTURaise, defaultPathMTURaise)
	if c.LossOutlierFactor == 0 {
		c.LossOutlierFactor = defaultLossOutlierFactor
	}
	setInt(&c.MaxSendWindow, defaultMaxSendWindow)
	setInt(&c.MaxAccepting, defaultMaxAccepting)
	setInt(&c.RetryAt, max(c.MaxAccepting/2, 1))
	setInt(&c.MaxReadsOut, defaultMaxReads)
	setInt(&c.MaxReadsIn, defaultMaxReads)
	setInt(&c.BaselineWindow, defaultBaselineWindow)
	if c.LineRate == 0 {
		c.LineRate = defaultLineRate
	}
	c.MaxReadsOut, c.MaxReadsIn = max(c.MaxReadsOut, 0), max(c.MaxReadsIn, 0)
	switch {
	case c.MaxPacket < proto.MinMTU || c.MaxPacket > proto.MaxPacketLen:
		return fmt.Errorf("engine: max packet %d: want %d .. %d", c.MaxPacket, proto.MinMTU, proto.MaxPacketLen)
	case c.BasePacket != 0 && (c.BasePacket < proto.MinMTU || c.BasePacket > proto.MaxPacketLen):
		return fmt.Errorf("engine: base packet %d: want 0 (none) or %d .. %d", c.BasePacket, proto.MinMTU, proto.MaxPacketLen)
	case c.Paths < 1 || c.Paths > proto.MaxPaths:
		return fmt.Errorf("engine: paths %d: want 1 .. %d", c.Paths, proto.MaxPaths)
	case c.Streams < 1 || c.Streams > proto.MaxStreams:
		return fmt.Errorf("engine: streams %d: want 1 .. %d", c.Streams, proto.MaxStreams)
	case c.DSNWindow < 1 || c.DSNWindow > 1<<20:
		return fmt.Errorf("engine: DSN window %d: want 1 .. %d", c.DSNWindow, 1<<20)
	case c.PathWindow < 1 || c.PathWindow >= maxPathRing:
		return fmt.Errorf("engine: path window %d: want 1 .. %d", c.PathWindow, maxPathRing-1)
	case c.Mode > proto.ModeBaseline:
		return fmt.Errorf("engine: mode %v", c.Mode)
	case c.BaselineWindow < 1 || c.BaselineWindow > 255:
		return fmt.Errorf("engine: baseline window %d: want 1 .. 255", c.BaselineWindow)
	case c.AckEvery < 1 || c.AckEvery > maxAckEvery:
		return fmt.Errorf("engine: ack every %d packets: want 1 .. %d", c.AckEvery, maxAckEvery)
	case c.MaxReadsOut > 65535 || c.MaxReadsIn > 65535:
		return fmt.Errorf("engine: READ limits %d, %d: want at most 65535", c.MaxReadsOut, c.MaxReadsIn)
	case c.RetryAt < RetryNever:
		return fmt.Errorf("engine: retry at %d half-open handshakes: want 1 or more, RetryAlways or RetryNever", c.RetryAt)
	case c.MaxSendWindow < 1 || c.MaxSendWindow > 1<<20:
		return fmt.Errorf("engine: max send window %d: want 1 .. %d", c.MaxSendWindow, 1<<20)
	case c.Resend > ResendSamePath:
		return fmt.Errorf("engine: %v", c.Resend)
	case c.FirstWindow > FirstWindowFixed:
		return fmt.Errorf("engine: %v", c.FirstWindow)
	}
	if c.Auth != nil {
		switch err := c.Auth.Check(); {
		case err != nil:
			return fmt.Errorf("engine: %w", err)
		case c.Mode != proto.ModeMultipath:
			return errors.New("engine: the authenticated mode needs the multipath mode: the baseline reuses PSNs, and with them nonces (spec section 13.3)")
		case c.PlaceholderPayloads:
			return errors.New("engine: the authenticated mode needs real payloads, which it encrypts")
		}
	}
	for i, r := range c.PortRates {
		if !(r > 0) || math.IsInf(r, 0) {
			return fmt.Errorf("engine: port rate %v of plane %d: want above 0 and finite", r, i)
		}
	}
	return nil
}

func setInt(v *int, def int) {
	if *v == 0 {
		*v = def
	}
}

func setDur(v *time.Duration, def time.Duration) {
	if *v == 0 {
		*v = def
	}
}
