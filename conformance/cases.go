package conformance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mroce/mroce/proto"
)

// Env is what a case needs, the responder and a local address on its
// first plane to probe from.
type Env struct {
	Target Target
	Local  netip.Addr
}

// Case is one packet-level check of a responder.
type Case struct {
	Name string
	Spec string // the sections of docs/spec.md it checks
	What string // what passes
	Run  func(env Env) error
}

// Result is one case's outcome.
type Result struct {
	Case    string        `json:"case"`
	Result  string        `json:"result"` // pass or fail, or for runner cases unsupported
	Details string        `json:"details,omitempty"`
	Spec    string        `json:"spec"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// The fields below serve the runner's cases. They name the
	// implementations in each role, the emulated network and its seed,
	// and the directory of the endpoints' logs and reports. Pcap is the
	// capture of every datagram the emulator delivered, with its headers
	// and the first bytes of its data.
	Requester string `json:"requester,omitempty"`
	Responder string `json:"responder,omitempty"`
	Scenario  string `json:"scenario,omitempty"`
	Seed      uint64 `json:"seed,omitempty"`
	Logs      string `json:"logs,omitempty"`
	Pcap      string `json:"pcap,omitempty"`
}

// Run runs cases against env, in order.
func Run(env Env, cases []Case) []Result {
	var out []Result
	for _, c := range cases {
		out = append(out, judged(c.Name, c.Spec, func() error { return c.Run(env) }))
	}
	return out
}

// judged runs one case. It passes, or fails with the error it returned,
// or is unsupported where it checks an option the responder did not take.
func judged(name, spec string, run func() error) Result {
	began := time.Now()
	err := run()
	r := Result{Case: name, Result: "pass", Spec: spec, Elapsed: time.Since(began)}
	var u unsupported
	switch {
	case errors.As(err, &u):
		r.Result, r.Details = "unsupported", err.Error()
	case err != nil:
		r.Result, r.Details = "fail", err.Error()
	}
	return r
}

// unsupported is a case's answer when the responder does not take the
// option the case checks, which the spec leaves to it.
type unsupported string

func (u unsupported) Error() string { return string(u) }

// dialGranted dials offering the capability c, which the responder may
// grant or not (spec section 8.3). A case of it is unsupported where the
// ACCEPT does not grant it.
func dialGranted(env Env, c proto.Capabilities) (*Prober, error) {
	p, err := DialOffering(env.Target, env.Local, random32(), c)
	if err != nil {
		return nil, err
	}
	if p.Accept().Capabilities()&c == 0 {
		p.Close()
		return nil, unsupported(fmt.Sprintf("the ACCEPT grants no %v", c))
	}
	return p, nil
}

// withProber dials, runs f, and closes.
func withProber(env Env, initialPSN uint32, f func(p *Prober) error) error {
	p, err := Dial(env.Target, env.Local, initialPSN)
	if err != nil {
		return err
	}
	defer p.Close()
	return f(p)
}

// ackAfter sends a valid WRITE with AR on path and returns the first ACK
// whose record for the path has that packet's PSN as its highest. That is
// the responder's view of the path once everything before has been
// handled.
func ackAfter(p *Prober, path uint8) (*proto.Packet, proto.AckRecord, Sent, error) {
	s, err := p.SendWrite(Write{Path: path, Payload: make([]byte, 64), Flags: proto.FlagAckRequest})
	if err != nil {
		return nil, nil, s, err
	}
	pkt, err := p.Expect(func(q *proto.Packet) bool {
		r, ok := Record(q, path)
		return ok && r.HighestPSN() == s.PSN
	})
	if err != nil {
		return nil, nil, s, fmt.Errorf("no ACK for PSN %d on path %d after AR: %w", s.PSN, path, err)
	}
	r, _ := Record(pkt, path)
	return pkt, r, s, nil
}

// noNackFor checks that no NACK names psn within d.
func noNackFor(p *Prober, psn uint32, d time.Duration) error {
	pkt, err := p.ExpectWithin(d, func(q *proto.Packet) bool { return q.Type() == proto.TypeNack && q.Nack().PSN() == psn })
	if errors.Is(err, ErrTimeout) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("a NACK %v for PSN %d, which the responder must drop silently", pkt.Nack().Code(), psn)
}

// expectNack waits for a NACK naming the refused packet s and checks its
// fields by spec sections 5.6 and 7.
func expectNack(p *Prober, s Sent, code proto.NackCode) error {
	pkt, err := p.Expect(func(q *proto.Packet) bool { return q.Type() == proto.TypeNack && q.Nack().PSN() == s.PSN })
	if err != nil {
		return fmt.Errorf("no NACK %v for PSN %d: %w", code, s.PSN, err)
	}
	n := pkt.Nack()
	if n.Code() != code || n.PathID() != s.Path || n.Epoch() != s.Epoch || n.DSN() != s.DSN || n.RetryAfter() != 0 {
		return fmt.Errorf("NACK %v path %d epoch %d PSN %d DSN %d retry %d; want %v for path %d epoch %d PSN %d DSN %d, retry 0",
			n.Code(), n.PathID(), n.Epoch(), n.PSN(), n.DSN(), n.RetryAfter(), code, s.Path, s.Epoch, s.PSN, s.DSN)
	}
	return nil
}

// refusedStaysClear checks what spec section 7 says of a refused or
// dropped packet. It is neither placed nor recorded, so its PSN is clear
// in the path's next ACK record and its DSN is not received.
func refusedStaysClear(p *Prober, s Sent) error {
	pkt, r, _, err := ackAfter(p, s.Path)
	if err != nil {
		return err
	}
	if Received(r, s.PSN) {
		return fmt.Errorf("PSN %d is reported received, but the packet was refused", s.PSN)
	}
	if cum := pkt.Ack().CumDSN(); !proto.SeqLessEq(cum, s.DSN) {
		return fmt.Errorf("CumDSN %d is past the refused DSN %d", cum, s.DSN)
	}
	return nil
}

// Cases is the packet-level suite, in the order it runs.
var Cases = []Case{
	{Name: "handshake", Spec: "5.8, 8.1, 8.2", What: "an ACCEPT with a nonzero id, Paths and Streams no more than asked, MaxPacket >= 256, a reply port, mode 0, no capability the CONNECT did not offer",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				a := p.Accept()
				switch {
				case a.SrcConnID() == 0:
					return errors.New("ACCEPT's SrcConnID is 0")
				case a.Paths() < 1 || a.Paths() > Paths:
					return fmt.Errorf("ACCEPT's Paths %d: want 1 .. %d", a.Paths(), Paths)
				case a.Streams() < 1 || int(a.Streams()) > max(1, env.Target.Streams):
					return fmt.Errorf("ACCEPT's Streams %d: want 1 .. %d", a.Streams(), max(1, env.Target.Streams))
				case a.MaxPacket() < 256 || a.ReplyPort() == 0 || a.Mode() != proto.ModeMultipath || a.InboundCapacity() == 0:
					return fmt.Errorf("ACCEPT MaxPacket %d, ReplyPort %d, Mode %v, InboundCapacity %d", a.MaxPacket(), a.ReplyPort(), a.Mode(), a.InboundCapacity())
				case a.Capabilities()&^p.offer != 0:
					// The prober's CONNECT offers none but AUTH to a
					// responder in the authenticated mode, and the ACCEPT
					// gives the AND of both sides' (spec section 8.2).
					return fmt.Errorf("ACCEPT sets capabilities %#x that the CONNECT did not offer", uint32(a.Capabilities()&^p.offer))
				}
				return nil
			})
		}},
	{Name: "write-ack", Spec: "5.5, 6.6", What: "a WRITE with AR is acknowledged at once: its PSN the record's highest, CumDSN past its DSN, a rate hint, CE count 0",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				pkt, r, s, err := ackAfter(p, 0)
				if err != nil {
					return err
				}
				a := pkt.Ack()
				if a.CumDSN() != s.DSN+1 || a.RateHint() == 0 || r.CECount() != 0 || r.Epoch() != 0 {
					return fmt.Errorf("ACK CumDSN %d (want %d), RateHint %d, CECount %d, epoch %d", a.CumDSN(), s.DSN+1, a.RateHint(), r.CECount(), r.Epoch())
				}
				return nil
			})
		}},
	{Name: "sack-exact", Spec: "5.5, 6.3", What: "the bitvector names exactly the packets withheld: 3 of 12 PSNs never sent, their bits clear, every other set, CumDSN at the first missing DSN",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				const path = 1
				withheld := map[int]bool{3: true, 7: true, 8: true}
				first := p.NextPSN(path)
				firstMissingDSN := uint32(0)
				for i := 0; i < 12; i++ {
					if withheld[i] {
						if firstMissingDSN == 0 {
							firstMissingDSN = p.NextDSN()
						}
						p.psn[path]++ // never sent, which leaves a gap in PSN and in DSN
						p.dsn++
						p.msn++
						continue
					}
					if _, err := p.SendWrite(Write{Path: path, Payload: make([]byte, 128)}); err != nil {
						return err
					}
				}
				pkt, r, last, err := ackAfter(p, path)
				if err != nil {
					return err
				}
				for i := 0; i < 12; i++ {
					if got := Received(r, first+uint32(i)); got == withheld[i] {
						return fmt.Errorf("PSN %d (packet %d of 12): reported received %v, withheld %v; bitvector %x", first+uint32(i), i, got, withheld[i], r.Bitvector())
					}
				}
				if !Received(r, last.PSN) || pkt.Ack().CumDSN() != firstMissingDSN {
					return fmt.Errorf("CumDSN %d, want %d (the first DSN withheld)", pkt.Ack().CumDSN(), firstMissingDSN)
				}
				return nil
			})
		}},
	{Name: "duplicate", Spec: "6.5, 9 step 9", What: "a DSN sent twice (the second with a new PSN) is acknowledged at once and its new PSN recorded",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				s, err := p.SendWrite(Write{Path: 2, Payload: make([]byte, 64)})
				if err != nil {
					return err
				}
				p.msn-- // the same message again
				dup, err := p.SendWrite(Write{Path: 2, DSN: s.DSN, ExplicitDSN: true, Payload: make([]byte, 64)})
				if err != nil {
					return err
				}
				pkt, err := p.Expect(func(q *proto.Packet) bool {
					r, ok := Record(q, 2)
					return ok && r.HighestPSN() == dup.PSN
				})
				if err != nil {
					return fmt.Errorf("the duplicate was not acknowledged (without AR): %w", err)
				}
				if r, _ := Record(pkt, 2); !Received(r, s.PSN) || pkt.Ack().CumDSN() != s.DSN+1 {
					return fmt.Errorf("ACK CumDSN %d (want %d), first PSN received %v", pkt.Ack().CumDSN(), s.DSN+1, Received(r, s.PSN))
				}
				return nil
			})
		}},
	{Name: "bad-key", Spec: "7, 9 step 13", What: "a WRITE with an unknown key is refused with NACK BAD_KEY naming it, and neither placed nor recorded",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				s, err := p.SendWrite(Write{Path: 0, RKey: env.Target.RKey ^ 0x5A5A5A5A5A5A5A5A, Payload: make([]byte, 64)})
				if err != nil {
					return err
				}
				if err := expectNack(p, s, proto.NackBadKey); err != nil {
					return err
				}
				return refusedStaysClear(p, s)
			})
		}},
	{Name: "bad-key-again", Spec: "7", What: "the responder that sent a fatal NACK keeps its connection until the requester closes it: the refused WRITE, resent under its DSN with a new PSN, is refused again with the same NACK naming the new PSN",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				w := Write{Path: 1, RKey: env.Target.RKey ^ 0x0F0F0F0F0F0F0F0F, Payload: make([]byte, 64), ExplicitMSN: true, MSN: p.msn}
				p.msn++
				first, err := p.SendWrite(w)
				if err != nil {
					return err
				}
				if err := expectNack(p, first, proto.NackBadKey); err != nil {
					return err
				}
				w.ExplicitDSN, w.DSN, w.Flags = true, first.DSN, proto.FlagRetransmit
				again, err := p.SendWrite(w)
				if err != nil {
					return err
				}
				if again.PSN == first.PSN {
					return errors.New("the resend took the same PSN")
				}
				return expectNack(p, again, proto.NackBadKey)
			})
		}},
	{Name: "bounds", Spec: "7, 9 step 15", What: "a WRITE past the region's end is refused with NACK BOUNDS",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				s, err := p.SendWrite(Write{Path: 0, RemoteOffset: env.Target.Len - 10, Payload: make([]byte, 100)})
				if err != nil {
					return err
				}
				if err := expectNack(p, s, proto.NackBounds); err != nil {
					return err
				}
				return refusedStaysClear(p, s)
			})
		}},
	{Name: "bad-stream", Spec: "7, 9 step 11", What: "a WRITE on a stream not negotiated is refused with NACK BAD_STREAM",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				s, err := p.SendWrite(Write{Path: 0, Stream: p.Accept().Streams(), Payload: make([]byte, 64)})
				if err != nil {
					return err
				}
				return expectNack(p, s, proto.NackBadStream)
			})
		}},
	{Name: "bad-crc", Spec: "5.11, 9 step 2", What: "a packet with a bad CRC is dropped silently: no NACK, its PSN clear, its DSN unreceived",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				s, err := p.SendWrite(Write{Path: 3, Payload: make([]byte, 64), CorruptCRC: true})
				if err != nil {
					return err
				}
				if err := noNackFor(p, s.PSN, 200*time.Millisecond); err != nil {
					return err
				}
				return refusedStaysClear(p, s)
			})
		}},
	{Name: "bad-version", Spec: "4, 9 step 3", What: "a packet of another version is dropped silently",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				s, err := p.SendWrite(Write{Path: 3, Payload: make([]byte, 64), Version: 1})
				if err != nil {
					return err
				}
				if err := noNackFor(p, s.PSN, 200*time.Millisecond); err != nil {
					return err
				}
				return refusedStaysClear(p, s)
			})
		}},
	{Name: "out-of-window", Spec: "6.5, 9 step 9", What: "a DSN at CumDSN + DSNWindow is dropped: no NACK, not recorded",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				s, err := p.SendWrite(Write{Path: 1, DSN: p.NextDSN() + p.Accept().DSNWindow(), ExplicitDSN: true, Payload: make([]byte, 64)})
				if err != nil {
					return err
				}
				if err := noNackFor(p, s.PSN, 200*time.Millisecond); err != nil {
					return err
				}
				_, r, _, err := ackAfter(p, 1)
				if err != nil {
					return err
				}
				if Received(r, s.PSN) {
					return fmt.Errorf("the out-of-window PSN %d is reported received", s.PSN)
				}
				return nil
			})
		}},
	{Name: "stale-epoch", Spec: "6.3", What: "after a repath (a new epoch at a later PSN), a late packet of the old epoch is placed but its PSN not recorded; the record is of the new epoch",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				const path = 2
				first, err := p.SendWrite(Write{Path: path, Payload: make([]byte, 64)})
				if err != nil {
					return err
				}
				late := first.PSN + 1
				p.psn[path] += 4 // PSNs first+1 .. first+4 stay in flight on the old route
				p.Repath(path)
				if _, err := p.SendWrite(Write{Path: path, Payload: make([]byte, 64)}); err != nil {
					return err
				}
				old, err := p.SendWrite(Write{Path: path, Epoch: 0, ExplicitEpoch: true, PSN: late, ExplicitPSN: true, Payload: make([]byte, 64)})
				if err != nil {
					return err
				}
				pkt, err := p.Expect(func(q *proto.Packet) bool {
					r, ok := Record(q, path)
					return ok && r.Epoch() == 1
				})
				if err != nil {
					return fmt.Errorf("no ACK record of epoch 1: %w", err)
				}
				// The late packet's DSN counts, as it was placed. The
				// connection's CumDSN covers all three DSNs once
				// acknowledged.
				for range 3 {
					if proto.SeqLess(old.DSN, pkt.Ack().CumDSN()) {
						break
					}
					next, _, _, err := ackAfter(p, path)
					if err != nil {
						return err
					}
					pkt = next
				}
				r, _ := Record(pkt, path)
				if r.Epoch() != 1 || Received(r, late) {
					return fmt.Errorf("record epoch %d, late PSN %d reported %v: want epoch 1 and the late PSN not recorded", r.Epoch(), late, Received(r, late))
				}
				if !proto.SeqLess(old.DSN, pkt.Ack().CumDSN()) {
					return fmt.Errorf("CumDSN %d: the late packet's DSN %d was not received", pkt.Ack().CumDSN(), old.DSN)
				}
				return nil
			})
		}},
	{Name: "psn-wrap", Spec: "2, 6.2", What: "16 packets whose PSNs wrap past 2^32: every one reported received, the highest after the wrap",
		Run: func(env Env) error {
			return withProber(env, 0xFFFFFFF8, func(p *Prober) error {
				for range 15 {
					if _, err := p.SendWrite(Write{Path: 3, Payload: make([]byte, 64)}); err != nil {
						return err
					}
				}
				_, r, last, err := ackAfter(p, 3)
				if err != nil {
					return err
				}
				if last.PSN != 7 || r.HighestPSN() != 7 {
					return fmt.Errorf("highest %d, want 7", r.HighestPSN())
				}
				for psn := uint32(0xFFFFFFF8); psn != 8; psn++ {
					if !Received(r, psn) {
						return fmt.Errorf("PSN %#x is not reported received; bitvector %x", psn, r.Bitvector())
					}
				}
				return nil
			})
		}},
	{Name: "malformed", Spec: "9 steps 1-6", What: "truncated, unknown-type and bad-length packets get no answer and leave the responder working",
		Run: func(env Env) error {
			return withProber(env, random32(), func(p *Prober) error {
				garbage := [][]byte{make([]byte, 10), make([]byte, 31), bytesOf(64, 0x0E), bytesOf(300, 0xFF)}
				for _, g := range garbage {
					if err := p.send(g); err != nil {
						return err
					}
				}
				if pkt, err := p.ExpectWithin(200*time.Millisecond, func(q *proto.Packet) bool { return q.Type() == proto.TypeNack }); err == nil {
					return fmt.Errorf("a NACK %v answered garbage", pkt.Nack().Code())
				}
				_, _, _, err := ackAfter(p, 0)
				return err
			})
		}},
	{Name: "recut-covered", Spec: "6.5, 8.3, 9 steps 10 and 17", What: "with RECUT granted, a piece of a packet already placed, under a new DSN, is recorded and not dropped, in a message under way and in one complete; a packet that places some bytes twice and some not is dropped; a responder that grants no RECUT is unsupported",
		Run: func(env Env) error {
			p, err := dialGranted(env, proto.CapRecut)
			if err != nil {
				return err
			}
			defer p.Close()
			const path = 1
			write := func(w Write) Sent {
				if err == nil {
					var s Sent
					s, err = p.SendWrite(w)
					return s
				}
				return Sent{}
			}
			// Message A, one packet: it completes. Message B, two halves.
			write(Write{Path: path, Payload: make([]byte, 128)})
			msnA := p.msn - 1
			b := Write{Path: path, MsgLen: 256, RemoteOffset: 256}
			b.Payload = make([]byte, 128)
			write(b)
			b.MSN, b.ExplicitMSN = p.msn-1, true
			// Pieces of what arrived, under new DSNs: one of B, under way,
			// and one of A, complete.
			b.MsgOffset, b.Payload = 64, make([]byte, 64)
			pieceB := write(b)
			pieceA := write(Write{Path: path, MsgLen: 128, MsgOffset: 64, MSN: msnA, ExplicitMSN: true, Payload: make([]byte, 64)})
			// Bytes of B placed and bytes not: dropped, not recorded.
			b.MsgOffset = 96
			partial := write(b)
			b.MsgOffset, b.Payload, b.Flags = 128, make([]byte, 128), proto.FlagAckRequest
			last := write(b)
			if err != nil {
				return err
			}
			pkt, err := p.Expect(func(q *proto.Packet) bool {
				r, ok := Record(q, path)
				return ok && r.HighestPSN() == last.PSN
			})
			if err != nil {
				return fmt.Errorf("no ACK for B's last packet: %w", err)
			}
			r, _ := Record(pkt, path)
			if !Received(r, pieceB.PSN) || !Received(r, pieceA.PSN) || Received(r, partial.PSN) {
				return fmt.Errorf("received: piece of B %v, piece of A %v (want both), partial overlap %v (want not)",
					Received(r, pieceB.PSN), Received(r, pieceA.PSN), Received(r, partial.PSN))
			}
			if cum := pkt.Ack().CumDSN(); cum != partial.DSN {
				return fmt.Errorf("CumDSN %d, want %d: every DSN received but the partial overlap's", cum, partial.DSN)
			}
			return nil
		}},
	{Name: "connect-resent", Spec: "8.1", What: "a CONNECT sent again once its ACCEPT has come is answered with the same ACCEPT (the same id, initial PSN and DSN), and the connection it made carries data",
		Run: func(env Env) error {
			psn := random32()
			p, got, err := answer(env.Target, env.Local, psn, 0)
			if err != nil {
				return err
			}
			defer p.Close()
			if got.Type() != proto.TypeAccept {
				return fmt.Errorf("the CONNECT drew a %v", got.Type())
			}
			first := bytes.Clone(got.Ext())
			firstPayload := bytes.Clone(got.Payload)
			again, err := p.connect(psn, nil)
			if err != nil {
				return fmt.Errorf("the CONNECT sent again: %w", err)
			}
			if again.Type() != proto.TypeAccept || !bytes.Equal(again.Ext(), first) || !bytes.Equal(again.Payload, firstPayload) {
				return fmt.Errorf("the CONNECT sent again drew a %v with SrcConnID %d, InitialPSN %d, InitialDSN %d; the first ACCEPT had %d, %d, %d",
					again.Type(), again.Handshake().SrcConnID(), again.Handshake().InitialPSN(), again.Handshake().InitialDSN(),
					got.Handshake().SrcConnID(), got.Handshake().InitialPSN(), got.Handshake().InitialDSN())
			}
			if err := p.establish(got); err != nil {
				return err
			}
			_, _, _, err = ackAfter(p, 0)
			return err
		}},
	{Name: "accept-reply-port", Spec: "8.1", What: "the ACCEPT goes to the CONNECT's ReplyPort, not to the port it was sent from",
		Run: func(env Env) error {
			p, err := newProber(env.Target, env.Local, random32(), 0)
			if err != nil {
				return err
			}
			defer p.Close()
			from, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(env.Local, 0)))
			if err != nil {
				return err
			}
			defer from.Close()
			var token *[proto.TokenLen]byte
			for retries := 0; ; retries++ {
				b, err := p.connectPacket(p.psn[0], token)
				if err != nil {
					return err
				}
				if _, err := from.WriteToUDPAddrPort(b, env.Target.Addr); err != nil {
					return err
				}
				got, err := p.Expect(func(q *proto.Packet) bool {
					return q.Common.DstConnID() == p.myID && (q.Type() == proto.TypeAccept || q.Type() == proto.TypeRetry || q.Type() == proto.TypeClose)
				})
				if err != nil {
					return fmt.Errorf("nothing came to the ReplyPort: %w", err)
				}
				if got.Type() == proto.TypeAccept {
					break
				}
				if got.Type() != proto.TypeRetry || retries == 3 {
					return fmt.Errorf("the CONNECT drew a %v", got.Type())
				}
				tok := got.Retry().Token()
				token = &tok
			}
			from.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if n, _, err := from.ReadFromUDPAddrPort(p.buf); err == nil {
				return fmt.Errorf("%d bytes came to the port the CONNECT was sent from", n)
			}
			return nil
		}},
	{Name: "atomics", Spec: "5.12, 6.5, 9 step 9", What: "with ATOMICS granted, FETCH_ADD and CMP_SWAP act on the big-endian word a WRITE before them on the stream left and answer with an ATOMIC_RESP of its value before; a FETCH_ADD resent under its DSN is acknowledged at once and not executed again; a responder that grants no ATOMICS is unsupported",
		Run: func(env Env) error {
			p, err := dialGranted(env, proto.CapAtomics)
			if err != nil {
				return err
			}
			defer p.Close()
			off := (env.Target.Len - 64) &^ 7
			v := uint64(random32())<<32 | uint64(random32())
			var word [8]byte
			binary.BigEndian.PutUint64(word[:], v)
			if _, err := p.SendWrite(Write{Path: 0, RemoteOffset: off, Payload: word[:]}); err != nil {
				return err
			}
			result := func(tag uint32) (uint64, error) {
				pkt, err := p.Expect(func(q *proto.Packet) bool {
					return q.Type() == proto.TypeAtomicResp && q.AtomicResp().AtomicTag() == tag
				})
				if err != nil {
					return 0, fmt.Errorf("no ATOMIC_RESP with tag %d: %w", tag, err)
				}
				return pkt.AtomicResp().Original(), nil
			}
			add := uint64(random32()) | 1
			first, msn, err := p.SendAtomic(Atomic{Type: proto.TypeFetchAdd, Path: 1, RemoteOffset: off, Operand: add, Tag: 1})
			if err != nil {
				return err
			}
			if got, err := result(1); err != nil {
				return err
			} else if got != v {
				return fmt.Errorf("FETCH_ADD returned %#x, want %#x, the word the WRITE before it left", got, v)
			}
			again, _, err := p.SendAtomic(Atomic{Type: proto.TypeFetchAdd, Path: 2, RemoteOffset: off, Operand: add, Tag: 1,
				Again: true, Sent: first, MSN: msn})
			if err != nil {
				return err
			}
			if _, err := p.Expect(func(q *proto.Packet) bool {
				r, ok := Record(q, 2)
				return ok && r.HighestPSN() == again.PSN
			}); err != nil {
				return fmt.Errorf("the FETCH_ADD resent under its DSN was not acknowledged as a duplicate: %w", err)
			}
			swap := ^v
			if _, _, err := p.SendAtomic(Atomic{Type: proto.TypeCmpSwap, Path: 3, RemoteOffset: off, Operand: swap, Compare: v + add, Tag: 2}); err != nil {
				return err
			}
			switch got, err := result(2); {
			case err != nil:
				return err
			case got == v+2*add:
				return fmt.Errorf("CMP_SWAP found %#x: the resent FETCH_ADD was executed again", got)
			case got != v+add:
				return fmt.Errorf("CMP_SWAP returned %#x, want %#x, the word after one FETCH_ADD of %#x", got, v+add, add)
			}
			if _, _, err := p.SendAtomic(Atomic{Type: proto.TypeFetchAdd, Path: 0, RemoteOffset: off, Tag: 3}); err != nil {
				return err
			}
			if got, err := result(3); err != nil {
				return err
			} else if got != swap {
				return fmt.Errorf("FETCH_ADD of 0 returned %#x, want %#x, what the CMP_SWAP wrote", got, swap)
			}
			return nil
		}},
	{Name: "atomic-refused", Spec: "7, 9 steps 12 and 15", What: "a FETCH_ADD at an offset that is not a multiple of 8 is refused with NACK BOUNDS, and one on a connection without ATOMICS with NACK UNSUPPORTED; neither is recorded; a responder that grants no ATOMICS is unsupported",
		Run: func(env Env) error {
			p, err := dialGranted(env, proto.CapAtomics)
			if err != nil {
				return err
			}
			defer p.Close()
			s, _, err := p.SendAtomic(Atomic{Type: proto.TypeFetchAdd, Path: 0, RemoteOffset: 4, Operand: 1, Tag: 1})
			if err != nil {
				return err
			}
			if err := expectNack(p, s, proto.NackBounds); err != nil {
				return fmt.Errorf("an unaligned FETCH_ADD: %w", err)
			}
			if err := refusedStaysClear(p, s); err != nil {
				return err
			}
			return withProber(env, random32(), func(q *Prober) error {
				if q.Accept().Capabilities()&proto.CapAtomics != 0 {
					return errors.New("the ACCEPT grants ATOMICS, which the CONNECT did not offer")
				}
				s, _, err := q.SendAtomic(Atomic{Type: proto.TypeFetchAdd, Path: 1, Operand: 1, Tag: 1})
				if err != nil {
					return err
				}
				if err := expectNack(q, s, proto.NackUnsupported); err != nil {
					return fmt.Errorf("a FETCH_ADD without ATOMICS: %w", err)
				}
				return refusedStaysClear(q, s)
			})
		}},
}

// bytesOf is n bytes whose second byte, the type, is typ and the rest
// zero. It is a version-0 header that decodes to nothing valid.
func bytesOf(n int, typ byte) []byte {
	b := make([]byte, n)
	b[1] = typ
	return b
}
