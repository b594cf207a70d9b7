package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/proto"
)

// AuthCases check a responder in the authenticated mode (docs/spec.md
// section 13). They need its credentials (Target.Auth): without them each
// is unsupported. Given them, every case of Cases also runs in the mode.
var AuthCases = []Case{
	{Name: "auth-handshake", Spec: "13.3, 13.4", What: "a CONNECT with AUTH and the credentials gets an ACCEPT with AUTH whose key exchange confirms, and a protected WRITE with AR a protected ACK that opens under the keys it made",
		Run: func(env Env) error {
			if err := needAuth(env); err != nil {
				return err
			}
			return withProber(env, random32(), func(p *Prober) error {
				if p.Accept().Capabilities()&proto.CapAuth == 0 {
					return errors.New("the ACCEPT does not set AUTH")
				}
				pkt, _, _, err := ackAfter(p, 0)
				if err != nil {
					return err
				}
				if !pkt.Common.Protected() {
					return errors.New("the ACK came unprotected")
				}
				return nil
			})
		}},
	{Name: "auth-clear", Spec: "13.3, 9 step 7", What: "on a connection in the mode, a WRITE with AR sent unprotected, with a good CRC and every field right, is dropped: no ACK or NACK, its PSN not recorded",
		Run: func(env Env) error {
			if err := needAuth(env); err != nil {
				return err
			}
			return droppedSilently(env, Write{Path: 2, Payload: make([]byte, 64), Flags: proto.FlagAckRequest, Clear: true})
		}},
	{Name: "auth-tag", Spec: "13.4, 9 step 2", What: "a protected WRITE with AR whose tag was changed is dropped silently: no ACK or NACK, its PSN not recorded",
		Run: func(env Env) error {
			if err := needAuth(env); err != nil {
				return err
			}
			return droppedSilently(env, Write{Path: 3, Payload: make([]byte, 64), Flags: proto.FlagAckRequest, CorruptCRC: true})
		}},
	{Name: "auth-plain-refused", Spec: "13.3", What: "a CONNECT without AUTH to a responder in the mode is refused with CLOSE PARAMS, Detail 28",
		Run: func(env Env) error {
			if err := needAuth(env); err != nil {
				return err
			}
			plain := env.Target
			plain.Auth = nil
			p, got, err := answer(plain, env.Local, random32(), 0)
			if err != nil {
				return fmt.Errorf("no answer: %w", err)
			}
			defer p.Close()
			if got.Type() != proto.TypeClose || got.Close().Reason() != proto.CloseParams || got.Close().Detail() != 28 {
				return fmt.Errorf("answered with %v, want CLOSE PARAMS 28", describe(got))
			}
			return nil
		}},
	{Name: "auth-wrong-key", Spec: "13.3", What: "a CONNECT with AUTH whose key exchange was made with other credentials (another pre-shared key, or a static key the responder does not admit) is dropped: no ACCEPT or CLOSE within 2 s",
		Run: func(env Env) error {
			if err := needAuth(env); err != nil {
				return err
			}
			wrong := env.Target
			wrong.Auth = &auth.Credentials{Method: auth.MethodPSK, PSK: bytes.Repeat([]byte{0xEE}, auth.PSKLen)}
			if bytes.Equal(wrong.Auth.PSK, env.Target.Auth.PSK) {
				wrong.Auth.PSK[0] ^= 1
			}
			if env.Target.Auth.Method == auth.MethodKeys {
				unknown, err := auth.NewPrivateKey(bytes.NewReader(bytes.Repeat([]byte{0x5A}, 32)))
				if err != nil {
					return err
				}
				wrong.Auth = &auth.Credentials{Method: auth.MethodKeys, Static: unknown, Peers: env.Target.Auth.Peers}
			}
			p, got, err := answer(wrong, env.Local, random32(), 0)
			if errors.Is(err, ErrTimeout) {
				return nil
			}
			if err != nil {
				return err
			}
			p.Close()
			return fmt.Errorf("answered with %v, want nothing", describe(got))
		}},
}

// needAuth makes a case of the mode unsupported without credentials.
func needAuth(env Env) error {
	if env.Target.Auth == nil {
		return unsupported("the responder's credentials are not given (--psk-file, or --key-file and --peer-key)")
	}
	return nil
}

// droppedSilently sends w on a connection of its own and checks that the
// responder drops it: nothing answers it, and its PSN is not recorded.
func droppedSilently(env Env, w Write) error {
	return withProber(env, random32(), func(p *Prober) error {
		s, err := p.SendWrite(w)
		if err != nil {
			return err
		}
		if err := nothingFor(p, w.Path, s.PSN, 300*time.Millisecond); err != nil {
			return err
		}
		return refusedStaysClear(p, s)
	})
}

// nothingFor checks that no ACK records psn on path and no NACK names it
// within d.
func nothingFor(p *Prober, path uint8, psn uint32, d time.Duration) error {
	pkt, err := p.ExpectWithin(d, func(q *proto.Packet) bool {
		if q.Type() == proto.TypeNack {
			return q.Nack().PSN() == psn
		}
		r, ok := Record(q, path)
		return ok && Received(r, psn)
	})
	if errors.Is(err, ErrTimeout) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%v answered a packet the responder must drop", describe(pkt))
}

// describe names a packet for a case's message.
func describe(pkt *proto.Packet) string {
	if pkt.Type() == proto.TypeClose {
		return fmt.Sprintf("CLOSE %v (detail %d)", pkt.Close().Reason(), pkt.Close().Detail())
	}
	return pkt.Type().String()
}
