package engine

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/mroce/mroce/proto"
)

// Config is an endpoint's configuration. Zero fields take the defaults
// documented on each.
type Config struct {
	// Planes are the endpoint's local addresses, one per plane (NIC port).
	Planes []netip.Addr
	// Port is the UDP port the endpoint receives on (its ReplyPort).
	// Default proto.DefaultPort.
	Port uint16
	// SourcePorts is the pool of local UDP source ports paths and control
	// packets are sent from. Default 49152-49407.
	SourcePorts []uint16
	// MaxPacket is the largest packet this endpoint sends or accepts (UDP
	// payload). Default 4,160: 4 KiB of payload in a WRITE.
	MaxPacket int
	// Paths and Streams offered or accepted per connection. Defaults 8, 8.
	Paths, Streams int
	// DSNWindow is the receive window in packets this endpoint offers.
	// Default 2,048.
	DSNWindow int
	// PathWindow caps the packets in flight per path; congestion control
	// moves each path's window below it (starting at min(16, PathWindow)).
	// Default 64, at most 255.
	PathWindow int
	// InboundCapacity is the rate this endpoint can receive, in bytes of
	// payload a second: what its rate hints share among the connections
	// sending to it. 0: unknown, and ACKs carry no limit.
	InboundCapacity float64
	// OutboundCapacity is the rate this endpoint's NIC can send, in bytes
	// of payload a second over all its planes: its connections with data
	// to send share it max-min, each wanting what its windows and its
	// receiver's hint allow. Without it (0) every connection paces on its
	// own, and together they may ask more of the NIC than it has: a queue
	// at the host's own port, which every connection's packets wait in.
	OutboundCapacity float64
	// HintHorizon turns a sender's declared backlog into its demand
	// (backlog / horizon) and is how long a silent sender keeps its share.
	// Default 20 µs: a few round trips of a data-center fabric.
	HintHorizon time.Duration
	// NoRateHints makes the endpoint send no rate hints (ACKs say no
	// limit): congestion control from the sending end only.
	NoRateHints bool
	// NoPacing sends as the windows allow, without spacing packets.
	NoPacing bool
	// PlaceholderPayloads is for simulations where the bytes moved do not
	// matter: data packets keep their full length (they take as long to
	// cross a link and are checked against their regions and receives as
	// always) but nothing copies their payload out of or into memory, and
	// no packet carries a CRC (proto.Packet.Unsealed, DecodeNoCRC). Every
	// protocol decision is the one real payloads get, as long as nothing
	// corrupts packets in flight (that would go unseen). Both ends must
	// set it; a peer without it rejects every packet's CRC. Never on a
	// real network: the payload would be whatever the buffer last held,
	// and nothing would be checked (software.OpenUDPEngine refuses it).
	PlaceholderPayloads bool
	// Mode is the transport of the connections this endpoint opens:
	// proto.ModeMultipath (this spec's), or proto.ModeBaseline (RoCEv2-like,
	// spec section 10: one path, go-back-N, DCQCN). An acceptor serves
	// either.
	Mode proto.Mode
	// BaselineWindow is the go-back-N window in packets of a baseline
	// connection: fixed before the run. Default 64.
	BaselineWindow int
	// LocalAckTimeout, when set, is a baseline connection's local ACK
	// timeout, fixed as RoCEv2 configures it (4.096 µs x 2^n): no RTT
	// estimate and no doubling. Zero (the default) uses the adaptive RTO
	// (RTOMin, RTOMax), which real sockets with unknown delays need.
	LocalAckTimeout time.Duration
	// LineRate is the sending NIC's rate in bytes/s, where DCQCN starts.
	// Default 12.5e9 (100 Gb/s).
	LineRate float64
	// AckEvery and AckDelay coalesce acknowledgments: an ACK after that
	// many data packets, or that long after the first unacknowledged one.
	// Defaults 8 and 5 µs.
	AckEvery int
	AckDelay time.Duration
	// RTOInitial, RTOMin and RTOMax bound the per-path retransmission
	// timeout. Defaults 1 ms, 50 µs and 100 ms. Real sockets want an RTOMin
	// that survives scheduling and GC pauses (milliseconds).
	RTOInitial, RTOMin, RTOMax time.Duration
	// ProbeMin is the floor of a path's tail-probe timer once the
	// receiver has granted a rate (without a hint the floor is RTOMin).
	// Default a fifth of RTOMin (10 µs): a probe declares nothing lost, and
	// a lost last packet that nothing follows waits this long to be found.
	// Real sockets want it at RTOMin, for the same reason as that.
	ProbeMin time.Duration
	// BadProbeMax bounds how long a path in ASSUMED_BAD waits between
	// probes: each unanswered probe doubles the wait, from the path's
	// retransmission timeout up to this (never below that timeout, which a
	// reply needs to come back in). Default 4 RTOMin (200 µs): a
	// blackholed plane that is repaired carries data again within that and
	// a round trip, for a probe per path per interval while it is out.
	BadProbeMax time.Duration
	// NoProgress is how long a connection may go without forward progress
	// while it has work outstanding before it fails. Default 1 s.
	NoProgress time.Duration
	// ConnectTimeout bounds the handshake. Default 1 s.
	ConnectTimeout time.Duration
	// LossOutlierFactor moves a path to a new source port (a new route)
	// when its smoothed loss is above 2% and this many times the other
	// paths' average. Default 4; negative: never for loss.
	LossOutlierFactor float64
	// MPL is the maximum packet lifetime: a path is repathed at most once
	// per MPL, and a closed connection's id stays quarantined for 2 MPL.
	// Default 100 ms.
	MPL time.Duration
	// MaxSendWindow caps the DSNs a connection keeps in flight, whatever
	// window the peer offers: the sender's state per connection. Default
	// 4,096.
	MaxSendWindow int
	// MaxAccepting caps the connections in the middle of their handshake
	// (accepted, not yet established); beyond it CONNECTs are refused with
	// CLOSE RESOURCE. Default 1,024.
	MaxAccepting int
	// MaxReadsOut is how many READs a connection may have outstanding as
	// requester, MaxReadsIn how many it serves at once as responder
	// (negotiated: spec section 8.2). Defaults 16 and 16; -1 for none.
	MaxReadsOut, MaxReadsIn int
	// Random is the source of connection ids and initial sequence numbers
	// (and memreg keys, when the registry is made from this config).
	// Default crypto/rand. Simulations pass a seeded source.
	Random io.Reader
	// Tracer, when set, hears of the sender's decisions (TraceEvent).
	Tracer Tracer
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
	setDur(&c.RTOInitial, defaultRTOInitial)
	setDur(&c.RTOMin, defaultRTOMin)
	setDur(&c.RTOMax, defaultRTOMax)
	setDur(&c.ProbeMin, c.RTOMin/5)
	setDur(&c.BadProbeMax, 4*c.RTOMin)
	setDur(&c.NoProgress, defaultNoProgress)
	setDur(&c.ConnectTimeout, defaultConnectTimeout)
	setDur(&c.MPL, defaultMPL)
	if c.LossOutlierFactor == 0 {
		c.LossOutlierFactor = defaultLossOutlierFactor
	}
	setInt(&c.MaxSendWindow, defaultMaxSendWindow)
	setInt(&c.MaxAccepting, defaultMaxAccepting)
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
	case c.MaxSendWindow < 1 || c.MaxSendWindow > 1<<20:
		return fmt.Errorf("engine: max send window %d: want 1 .. %d", c.MaxSendWindow, 1<<20)
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
