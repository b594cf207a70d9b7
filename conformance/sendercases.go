package conformance

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/mroce/mroce/proto"
)

// SenderEnv starts the requester under test against the probe at peer,
// the probe's first plane's address and port. It returns a function that
// stops the requester. Local is the address the probe listens on.
type SenderEnv struct {
	Local netip.Addr
	Start func(peer netip.AddrPort) (stop func(), err error)
}

// SenderCase is a case of the requester under test. Accept, when set,
// changes the probe's ACCEPT.
type SenderCase struct {
	Name, Spec, What string
	Run              func(s *SenderProbe) error
	Accept           func(accept, connect proto.HandshakeHeader)
}

// RunSender runs the sender cases, each with its own requester and probe.
func RunSender(env SenderEnv, cases []SenderCase) []Result {
	var out []Result
	for _, c := range cases {
		out = append(out, judged(c.Name, c.Spec, func() error { return runSenderCase(env, c) }))
	}
	return out
}

// runSenderCase runs one case against a requester started for it.
func runSenderCase(env SenderEnv, c SenderCase) error {
	s, err := ListenSender(netip.AddrPortFrom(env.Local, 0))
	if err != nil {
		return err
	}
	defer s.Close()
	stop, err := env.Start(s.Addr())
	if err != nil {
		return fmt.Errorf("starting the requester: %w", err)
	}
	defer stop()
	s.AcceptEdit = c.Accept
	if err := s.Accept(); err != nil {
		return err
	}
	return c.Run(s)
}

// receive records and acknowledges every data packet until n have
// arrived, and returns them.
func (s *SenderProbe) receive(n int) ([]Arrival, error) {
	var out []Arrival
	for len(out) < n {
		a, _, err := s.NextData(s.Timeout)
		if err != nil {
			return out, fmt.Errorf("after %d data packets: %w", len(out), err)
		}
		s.Record(a)
		out = append(out, a)
		if err := s.Ack(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// SenderCases are the requester's cases.
var SenderCases = []SenderCase{
	{Name: "sender-sack-repair", Spec: "5.5, 6.4, 6.6", What: "after 8 packets acknowledged one by one, the requester sends while no ACK comes; then an ACK reports every packet of that burst but the first of a path that carried two: that one is resent at once (before the requester has sent 64 new packets, or four times the burst if more, and within 20 ms), with its DSN and a new PSN",
		Run: sackRepair},
	{Name: "sender-rnr", Spec: "7", What: "a packet refused with NACK RNR, RetryAfter 20 ms, is resent with its DSN and a new PSN no sooner than 20 ms later, and within 1 s",
		Run: rnrRetry},
	{Name: "sender-hint-zero", Spec: "5.5, 6.6", What: "after an ACK with RateHint 0 (and ACKs repeating it every millisecond, for 50 ms) at most 64 new DSNs arrive, what was in flight or queued; a hint with no limit brings new data back within 1 s",
		Run: hintZero},
	{Name: "sender-ecn", Spec: "5.5, 6.4", What: "with every packet acknowledged at once, 64 packets show how the requester spreads new data over its paths; then every packet on the path that carried most is echoed as marked CE: among the last 128 of the next 256 packets, that path carries less than half its earlier share of the new DSNs",
		Run: ecnSlows},
	{Name: "sender-fatal-nack", Spec: "7, 8.3", What: "a packet refused with NACK BAD_KEY (fatal) makes the requester CLOSE the connection with reason FATAL and Detail 1 (within 1 s), and send no data after its CLOSE",
		Run: fatalNack},
	{Name: "sender-accept-refused", Spec: "8.2", What: "an ACCEPT that grants more paths than the CONNECT asked for is refused with CLOSE PARAMS, Detail 18 (the offset of Paths), DstConnID the ACCEPT's SrcConnID (within 1 s), and no data follows",
		Accept: func(a, connect proto.HandshakeHeader) { a.SetPaths(connect.Paths() + 1) },
		Run:    acceptRefused},
}

// acceptRefused runs sender-accept-refused: the probe's ACCEPT granted
// more paths than asked, which the requester must refuse (spec section
// 8.2).
func acceptRefused(s *SenderProbe) error {
	_, closing, err := s.NextData(time.Second)
	switch {
	case errors.Is(err, ErrTimeout):
		return errors.New("no CLOSE within 1 s of an ACCEPT with too many paths")
	case err == nil:
		return errors.New("data after an ACCEPT with too many paths")
	case !errors.Is(err, ErrPeerClosed):
		return err
	}
	c := closing.Close()
	if c.Reason() != proto.CloseParams || c.Detail() != 18 || closing.Common.DstConnID() != s.myID {
		return fmt.Errorf("CLOSE %v, Detail %d, DstConnID %#x: want PARAMS, 18, %#x (the ACCEPT's SrcConnID)",
			c.Reason(), c.Detail(), closing.Common.DstConnID(), s.myID)
	}
	if _, _, err := s.NextData(200 * time.Millisecond); err == nil {
		return errors.New("data after the CLOSE")
	}
	return nil
}

// sackRepair runs sender-sack-repair. It acknowledges a few packets one
// by one while the requester's transfer gets under way, then collects a
// burst, acknowledges all of it but one packet, and waits for that one's
// resend.
func sackRepair(s *SenderProbe) error {
	if _, err := s.receive(8); err != nil {
		return err
	}
	burst, err := collectBurst(s)
	if err != nil {
		return err
	}
	victim := gapVictim(burst)
	if victim == nil {
		return fmt.Errorf("no path carried two packets in the burst (%d packets)", len(burst))
	}
	for _, b := range burst {
		if b.DSN != victim.DSN {
			s.Record(b)
		}
	}
	if err := s.Ack(); err != nil {
		return err
	}
	return awaitResend(s, *victim, len(burst))
}

// collectBurst collects what the requester sends while no ACK comes. It
// stops 300 µs after some path has carried two packets, sooner than a
// sender's probe timer fires, so that what follows answers the ACK.
func collectBurst(s *SenderProbe) ([]Arrival, error) {
	var burst []Arrival
	deadline := time.Now().Add(s.Timeout)
	var stop time.Time
	for len(burst) < 64 {
		if stop.IsZero() && gapVictim(burst) != nil {
			stop = time.Now().Add(300 * time.Microsecond)
		}
		wait := time.Until(deadline)
		if !stop.IsZero() {
			wait = time.Until(stop)
		}
		a, _, err := s.NextData(max(wait, time.Microsecond))
		if errors.Is(err, ErrTimeout) && !stop.IsZero() {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the burst (%d packets): %w", len(burst), err)
		}
		burst = append(burst, a)
	}
	return burst, nil
}

// gapVictim is the first packet in the burst of a path that carried a
// later one in the same epoch, or nil. A gap is a loss only within an
// epoch, by spec section 6.6, and a path repathed in between is left to
// its timer.
func gapVictim(burst []Arrival) *Arrival {
	for i := range burst {
		for j := range burst {
			if burst[i].Path == burst[j].Path && burst[i].Epoch == burst[j].Epoch && proto.SeqLess(burst[i].PSN, burst[j].PSN) {
				return &burst[i]
			}
		}
	}
	return nil
}

// awaitResend waits for victim's resend with a new PSN. It must come
// within 20 ms, and before the requester has sent 64 new packets or four
// times the burst if that is more. The burst may have been cut short by
// the clock, and a busy machine delays the ACK. A sender that waits for a
// timer keeps sending new data as the ACKs free its window. One that
// misreads the bitvector resends others and not this one. Resends of
// packets the ACK reported are not held against it, since a timer can
// have fired before the ACK came.
func awaitResend(s *SenderProbe, victim Arrival, burst int) error {
	until := time.Now().Add(20 * time.Millisecond)
	for k := 0; ; k++ {
		a, _, err := s.NextData(time.Until(until))
		if errors.Is(err, ErrTimeout) {
			return fmt.Errorf("DSN %d (path %d, PSN %d) not resent within 20 ms of the ACK that left it out", victim.DSN, victim.Path, victim.PSN)
		}
		if err != nil {
			return err
		}
		s.Record(a)
		switch {
		case a.DSN == victim.DSN && a.PSN == victim.PSN && a.Path == victim.Path:
			return fmt.Errorf("DSN %d resent with its old PSN %d", a.DSN, a.PSN)
		case a.DSN == victim.DSN:
			return nil
		case k >= max(64, 4*burst):
			return fmt.Errorf("DSN %d not resent before %d new packets (the burst was %d)", victim.DSN, k+1, burst)
		}
		if err := s.Ack(); err != nil {
			return err
		}
	}
}

// rnrRetry runs sender-rnr.
func rnrRetry(s *SenderProbe) error {
	const retry = 20 * time.Millisecond
	a, pkt, err := s.NextData(s.Timeout)
	if err != nil {
		return fmt.Errorf("no data packet: %w", err)
	}
	if err := s.Nack(a, pkt, proto.NackRNR, uint16(retry/time.Microsecond)); err != nil {
		return err
	}
	nacked := time.Now()
	until := nacked.Add(time.Second)
	others, last := 0, time.Duration(0)
	for {
		b, _, err := s.NextData(time.Until(until))
		if errors.Is(err, ErrTimeout) {
			return fmt.Errorf("DSN %d, refused RNR, not resent within 1 s (%d other data packets came, the last %v after the NACK)",
				a.DSN, others, last.Round(time.Microsecond))
		}
		if err != nil {
			return err
		}
		if b.DSN == a.DSN {
			if after := b.At.Sub(nacked); after < retry {
				return fmt.Errorf("DSN %d resent %v after the RNR NACK, before RetryAfter (%v)", a.DSN, after.Round(time.Microsecond), retry)
			}
			if b.PSN == a.PSN && b.Path == a.Path {
				return fmt.Errorf("DSN %d resent with its old PSN %d", a.DSN, a.PSN)
			}
			return nil
		}
		others, last = others+1, b.At.Sub(nacked)
		s.Record(b)
		if err := s.Ack(); err != nil {
			return err
		}
	}
}

// ecnSlows runs sender-ecn.
func ecnSlows(s *SenderProbe) error {
	before, err := s.receive(64)
	if err != nil {
		return err
	}
	per := map[uint8]int{}
	for _, a := range before {
		per[a.Path]++
	}
	marked := uint8(0)
	for p, n := range per {
		if n > per[marked] || n == per[marked] && p < marked {
			marked = p
		}
	}
	share := float64(per[marked]) / float64(len(before))
	s.MarkCE(marked)
	after, err := s.receive(256)
	if err != nil {
		return err
	}
	fresh, onMarked := 0, 0
	seen := map[uint32]bool{}
	for _, a := range before {
		seen[a.DSN] = true
	}
	for _, a := range after[:128] {
		seen[a.DSN] = true
	}
	for _, a := range after[128:] {
		if seen[a.DSN] {
			continue // a resend
		}
		seen[a.DSN] = true
		fresh++
		if a.Path == marked {
			onMarked++
		}
	}
	if fresh < 64 {
		return fmt.Errorf("only %d new DSNs among the last 128 packets", fresh)
	}
	if got := float64(onMarked) / float64(fresh); got >= share/2 {
		return fmt.Errorf("path %d, every packet of it echoed as CE, still carried %.0f%% of the new DSNs (%d of %d), against %.0f%% before the marks",
			marked, 100*got, onMarked, fresh, 100*share)
	}
	return nil
}

// hintZero runs sender-hint-zero.
func hintZero(s *SenderProbe) error {
	if _, err := s.receive(4); err != nil {
		return err
	}
	seen := map[uint32]bool{}
	s.SetHint(0)
	if err := s.Ack(); err != nil {
		return err
	}
	// For 50 ms, ACKs carry the hint of 0, every millisecond and for
	// every packet. What was in flight or queued when the hint came may
	// still arrive, up to hintZeroGrace new DSNs. More means a sender that
	// did not stop. One that ignores the hint, ACK-clocked here, sends
	// thousands.
	stopped := time.Now()
	fresh := 0
	next := time.Now().Add(time.Millisecond)
	for time.Since(stopped) < 50*time.Millisecond {
		wait := max(min(time.Until(next), 50*time.Millisecond-time.Since(stopped)), time.Microsecond)
		a, _, err := s.NextData(wait)
		switch {
		case errors.Is(err, ErrTimeout):
		case err != nil:
			return err
		default:
			s.Record(a)
			if a.Flags&proto.FlagRetransmit == 0 && !seen[a.DSN] {
				seen[a.DSN] = true
				if fresh++; fresh > hintZeroGrace {
					return fmt.Errorf("%d new DSNs in the %v after a hint of 0", fresh, time.Since(stopped).Round(time.Millisecond))
				}
			}
			if err := s.Ack(); err != nil {
				return err
			}
		}
		if time.Now().After(next) {
			if err := s.Ack(); err != nil { // the hint of 0, repeated
				return err
			}
			next = time.Now().Add(time.Millisecond)
		}
	}
	// The lifted hint is repeated every millisecond. Otherwise a lost ACK
	// would leave the sender stopped, by spec section 6.6.
	s.SetHint(proto.RateNoLimit)
	until := time.Now().Add(time.Second)
	for {
		if err := s.Ack(); err != nil {
			return err
		}
		a, _, err := s.NextData(min(time.Millisecond, time.Until(until)))
		if errors.Is(err, ErrTimeout) {
			if time.Now().Before(until) {
				continue
			}
			return errors.New("no new data within 1 s of a hint with no limit")
		}
		if err != nil {
			return err
		}
		s.Record(a)
		if a.Flags&proto.FlagRetransmit == 0 && !seen[a.DSN] {
			return nil
		}
		if err := s.Ack(); err != nil {
			return err
		}
	}
}

// hintZeroGrace is how many new DSNs a requester may send after a hint
// of 0 reaches it, for what it had in flight or had queued for the wire.
const hintZeroGrace = 64

// fatalNack runs sender-fatal-nack.
func fatalNack(s *SenderProbe) error {
	a, pkt, err := s.NextData(s.Timeout)
	if err != nil {
		return fmt.Errorf("no data packet: %w", err)
	}
	if err := s.Nack(a, pkt, proto.NackBadKey, 0); err != nil {
		return err
	}
	until := time.Now().Add(time.Second)
	for {
		_, closing, err := s.NextData(time.Until(until))
		switch {
		case errors.Is(err, ErrTimeout):
			return errors.New("no CLOSE within 1 s of a fatal NACK")
		case errors.Is(err, ErrPeerClosed):
			c := closing.Close()
			if c.Reason() != proto.CloseFatal || c.Detail() != uint32(proto.NackBadKey) {
				return fmt.Errorf("CLOSE with reason %v, detail %d: want FATAL, %d", c.Reason(), c.Detail(), proto.NackBadKey)
			}
			// Nothing may be sent after the CLOSE by the sender's own
			// clock, its Timestamp. Packets from different source ports
			// can arrive out of order, so the probe waits a little for
			// stragglers.
			closed := closing.Common.Timestamp()
			for {
				b, _, err := s.NextData(100 * time.Millisecond)
				if err != nil {
					return nil
				}
				if int32(b.Timestamp-closed) > 0 {
					return fmt.Errorf("data (DSN %d) sent %d ns after the CLOSE", b.DSN, b.Timestamp-closed)
				}
			}
		case err != nil:
			return err
		}
	}
}
