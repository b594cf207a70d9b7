package engine

import (
	"time"

	"github.com/mroce/mroce/proto"
)

// Values fixed by the spec. Changing one breaks interoperability.
const (
	maxPathRing     = 256                    // PSNs in flight on a path, what an ACK record's bitvector can name (section 5.5)
	maxAckEvery     = 128                    // a record at least every 128 PSNs keeps every PSN in two ACKs' bitvectors (section 6.6)
	sourcePortFirst = 49152                  // the first source port of the default pool, in the dynamic range (section 11)
	handshakeRetry  = 100 * time.Millisecond // the first CONNECT resend interval, doubled each time (section 8.1)
	handshakeMaxGap = time.Second            // the longest interval between CONNECT resends (section 8.1)
	closeResends    = 3                      // CLOSE resends until the peer answers CLOSE CLOSED (section 8.5)
	closeInterval   = 100 * time.Millisecond // between CLOSE resends (section 8.5)
	keepAliveProbe  = 0                      // the ProbeID of a keep-alive; path probes never use it (section 8.6)
	maxRetries      = 3                      // RETRYs an initiator takes per connect attempt: one to validate, more for tokens that expired (section 8.1)
)

// mroce's address-validation tokens (spec section 8.1). Only the endpoint
// that makes a token reads it, so these are this implementation's, not the
// wire format's.
const (
	// tokenLifetime is how long a token stays valid: twice the default
	// ConnectTimeout, so that it outlasts the initiator's resends with it
	// and their round trips, and short, so that a token seen on its way is
	// soon of no use. An older token draws a new RETRY.
	tokenLifetime = 2 * time.Second
	tokenMACLen   = proto.TokenLen - 4 // the token after its 4-byte issue time: truncated HMAC-SHA256
	tokenKeyLen   = 32                 // the HMAC-SHA256 secret, drawn from Config.Random
	tokenKeyLife  = 24 * time.Hour     // how long a secret makes tokens: far less than the 2^32 ms in which a token's issue time comes round
)

// Headroom is the share of a NIC's rate that the rate allocations give
// out where a queue marks nothing: a host's own NIC queue, which no
// switch marks. The rest lets that queue drain rather than stand. The
// simulator's hosts set their Config.OutboundCapacity with it and give
// their receivers all of their downlinks' rate, whose queues are switch
// ports that mark: a receiver holds back while its arrivals are marked
// (inbound.go). The socket hosts have no OutboundCapacity, and set
// Config.InboundCapacity with it.
const Headroom = 0.98

// Defaults of Config, tuned rather than specified. Config's fields say what
// each one does.
const (
	defaultSourcePorts       = 256                    // as many as the most paths a connection has (section 6.1)
	defaultMaxPacket         = 4160                   // a jumbo frame with 4 KiB of payload in a WRITE, with its headers
	defaultPaths             = 8                      // enough ECMP entropy for a few planes
	defaultStreams           = 8                      // ordered streams above one connection
	defaultDSNWindow         = 4096                   // 340 µs of 400 Gb/s, for a DSN lost several times in a row (docs/cc.md)
	defaultPathWindow        = maxPathRing - 1        // all a path's ACK records can name: one path carries a BDP of 400 Gb/s and 12.5 µs
	defaultHintHorizon       = 20 * time.Microsecond  // a few round trips of a data-center fabric
	defaultAckEvery          = 8                      // one ACK for a handful of packets
	defaultAckDelay          = 5 * time.Microsecond   // a fraction of a fabric round trip
	defaultRTOInitial        = time.Millisecond       // before any RTT sample
	defaultRTOMin            = 50 * time.Microsecond  // a data-center fabric's queues; real sockets set milliseconds
	defaultRTOMax            = 100 * time.Millisecond // the MPL, after which no packet is still in flight
	defaultNoProgress        = time.Second            // a connection this long without progress fails
	defaultConnectTimeout    = time.Second            // the handshake's deadline
	defaultMPL               = 100 * time.Millisecond // the spec's suggested maximum packet lifetime (section 6.3)
	defaultPathMTURaise      = 10 * time.Minute       // RFC 8899's PMTU_RAISE_TIMER (Config.PathMTURaise)
	defaultLossOutlierFactor = 4                      // a path whose loss is four times its siblings' is on a bad route
	defaultMaxSendWindow     = 4096                   // the sender's DSN state per connection, whatever the peer offers
	defaultMaxAccepting      = 1024                   // half-open handshakes before CONNECTs are refused
	defaultMaxReads          = 16                     // READs outstanding each way (section 8.2)
	defaultBaselineWindow    = 64                     // the baseline's go-back-N window, as RoCEv2 NICs configure it
	defaultLineRate          = 12.5e9                 // 100 Gb/s in bytes a second, where DCQCN starts
)

// Tuned internals.
const (
	initialRing    = 16                    // a sender's first DSN ring, small because most ends of a connection only receive
	minPathRing    = 4                     // a path's first PSN ring, doubled up to maxPathRing as it fills
	initialMsgRing = 4                     // a receive stream's first ring of messages in progress
	tailPackets    = 4                     // packets in flight that make the tail of a transfer (probeOverdue)
	ackRepeatAfter = 4                     // ACK delays of quiet after which the last ACK is repeated
	repeatSpell    = 64                    // ACKs that repeat records after the receiver saw loss (sawLoss)
	repeatMiss     = 0.01                  // how likely a record and all its repeats may be lost at the receiver's skip rate (recordEchoes)
	lossRound      = 64                    // PSNs recorded or skipped over which the receiver's skip rate is averaged (recordPath)
	rnrRetryMicros = 100                   // the RetryAfter of an RNR NACK, in µs (section 7)
	packetOverhead = 60 + 4 + 28           // a WRITE's headers, trailer, IP and UDP headers, which the baseline's DCQCN pacing charges beyond a payload
	cnpInterval    = 50 * time.Microsecond // the least time between two CNPs of a baseline connection, as at DCQCN's notification point
	pacerCatchUp   = time.Millisecond      // the most pacing time a late wake makes up at once: a quiet host's timer lateness many times, and not a stall of a busy one
	soloProbes     = 4                     // unanswered probes after which a path alone on its plane tries a new source port (routeSuspect)
	lateMemory     = time.Second           // how long the round trip a spurious timeout revealed stays the timeouts' floor before it halves (lateFloor)
	lossMemory     = 64                    // ACK-record verdicts the connection's random loss rate averages over (randomLoss)
	lossVerdicts   = 16                    // verdicts before the connection's loss rate explains anything (randomLoss.explains)
	lossExplains   = 0.01                  // how likely under random loss a silence must be for it to be no evidence (randomLoss.explains)
	tailMiss       = 0.01                  // how likely every transmission of a DSN at the tail may be lost (randomLoss.tailCopies)
	tailLossRate   = 0.02                  // the random loss from which a packet overtaken at the tail is taken for lost before its path probes (randomLoss.atRandom)
	maxTailCopies  = 3                     // the most copies a transmission at the tail gets (randomLoss.tailCopies)
)

// repeatSampleMax is the longest ServiceTime, in nanoseconds, over which a
// repeated ACK record's round trip is sampled (onRecord): clocks 100 ppm
// apart drift 0.1 µs over it.
const repeatSampleMax = uint32(time.Millisecond)
