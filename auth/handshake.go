package auth

import (
	"bytes"
	"crypto/ecdh"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"

	"github.com/mroce/mroce/proto"
)

// Method is how the two ends of a connection prove themselves (spec
// section 13.2).
type Method uint8

const (
	MethodPSK  Method = 1 // a pre-shared key
	MethodKeys Method = 2 // static X25519 keys, pinned on both sides
)

func (m Method) String() string {
	switch m {
	case MethodPSK:
		return "PSK"
	case MethodKeys:
		return "KEYS"
	}
	return fmt.Sprintf("method(%d)", uint8(m))
}

// PSKLen is the length of a pre-shared key.
const PSKLen = 32

// Credentials are what an endpoint proves itself with, and what it asks
// of its peers (spec section 13.2).
type Credentials struct {
	Method Method
	// PSK is the pre-shared key of MethodPSK.
	PSK []byte
	// Static is the endpoint's own key pair for MethodKeys.
	Static *ecdh.PrivateKey
	// Peers, for MethodKeys, are the acceptor's public key that an
	// initiator pins (the first), or the initiators' keys an acceptor
	// admits.
	Peers []*ecdh.PublicKey
	// Suite is the AEAD an initiator asks for; 0 means AES128GCM. An
	// acceptor takes either suite.
	Suite Suite
}

// Check reports what is missing or malformed in c.
func (c *Credentials) Check() error {
	switch c.Method {
	case MethodPSK:
		if len(c.PSK) != PSKLen {
			return fmt.Errorf("auth: a pre-shared key is %d bytes, not %d", PSKLen, len(c.PSK))
		}
	case MethodKeys:
		if c.Static == nil || c.Static.Curve() != ecdh.X25519() {
			return errors.New("auth: static keys need this endpoint's X25519 private key")
		}
		if len(c.Peers) == 0 {
			return errors.New("auth: static keys need the peer's public key, or the keys an acceptor admits")
		}
		for _, p := range c.Peers {
			if p == nil || p.Curve() != ecdh.X25519() {
				return errors.New("auth: a peer's key is not an X25519 public key")
			}
			if _, err := c.Static.ECDH(p); err != nil {
				return errors.New("auth: a peer's key is of low order: no key exchange with it is secret")
			}
		}
	default:
		return fmt.Errorf("auth: unknown method %d", uint8(c.Method))
	}
	if c.Suite != 0 && !c.Suite.Known() {
		return fmt.Errorf("auth: unknown suite %d", uint8(c.Suite))
	}
	return nil
}

func (c *Credentials) suite() Suite {
	if c.Suite == 0 {
		return AES128GCM
	}
	return c.Suite
}

// Secrets are what a handshake gives one side: the suite and the phase-0
// secrets of what it sends and what it receives (spec section 13.3).
type Secrets struct {
	Suite      Suite
	Send, Recv []byte
}

// RefusedError is a CONNECT the acceptor refuses with CLOSE PARAMS: a
// suite it does not offer or another method than its own. Detail is the
// CLOSE's Detail, the field's offset in the CONNECT's extensions.
type RefusedError struct {
	Detail uint32
	Reason string
}

func (e *RefusedError) Error() string { return "auth: CONNECT refused: " + e.Reason }

// ErrFailed is a handshake packet that does not prove what it must. The
// packet is dropped, counted, and never answered.
var ErrFailed = proto.ErrAuthFailed

// Detail values of a refusal: the offsets of Suite and Method in the
// CONNECT's extensions, after its 44-byte HandshakeHeader.
const (
	DetailSuite  = proto.HandshakeHeaderLen
	DetailMethod = proto.HandshakeHeaderLen + 1
)

// x25519 returns DH(priv, pub). A result of all zeros fails, as a low-order
// public key gives.
func x25519(priv *ecdh.PrivateKey, pub []byte) ([]byte, error) {
	p, err := ecdh.X25519().NewPublicKey(pub)
	if err != nil {
		return nil, ErrFailed
	}
	out, err := priv.ECDH(p)
	if err != nil {
		return nil, ErrFailed
	}
	return out, nil
}

// newEphemeral draws an X25519 private key from random.
func newEphemeral(random io.Reader) (*ecdh.PrivateKey, error) {
	var b [32]byte
	if _, err := io.ReadFull(random, b[:]); err != nil {
		return nil, fmt.Errorf("auth: drawing an ephemeral key: %w", err)
	}
	return ecdh.X25519().NewPrivateKey(b[:])
}

// Initiation is an initiator's half of a handshake, from its CONNECT to the
// ACCEPT that confirms it.
type Initiation struct {
	cred     *Credentials
	suite    Suite
	eph      *ecdh.PrivateKey
	ck1, thc []byte
	hello    [proto.AuthHelloLen]byte
}

// Initiate starts the handshake of the CONNECT whose HandshakeHeader is
// hs, final but for nothing: every resend of the CONNECT carries the same
// header and Hello.
func Initiate(cred *Credentials, random io.Reader, hs proto.HandshakeHeader) (*Initiation, error) {
	if err := cred.Check(); err != nil {
		return nil, err
	}
	eph, err := newEphemeral(random)
	if err != nil {
		return nil, err
	}
	in := &Initiation{cred: cred, suite: cred.suite(), eph: eph}
	h := proto.AuthHello(in.hello[:])
	h.SetSuite(uint8(in.suite))
	h.SetMethod(uint8(cred.Method))
	copy(in.hello[4:36], eph.PublicKey().Bytes())
	switch cred.Method {
	case MethodPSK:
		in.ck1 = mix(ck0[:], cred.PSK)
	case MethodKeys:
		acceptor := cred.Peers[0].Bytes()
		es, err := x25519(eph, acceptor)
		if err != nil {
			return nil, err
		}
		cke := mix(ck0[:], es)
		the := transcript(hs[:proto.HandshakeHeaderLen], in.hello[:36])
		a, err := in.suite.aead(expandLabel(cke, "static", the, in.suite.keyLen()))
		if err != nil {
			return nil, err
		}
		a.Seal(in.hello[36:36], make([]byte, nonceLen), cred.Static.PublicKey().Bytes(), the)
		ss, err := x25519(cred.Static, acceptor)
		if err != nil {
			return nil, err
		}
		in.ck1 = mix(cke, ss)
	}
	in.thc = transcript(hs[:proto.HandshakeHeaderLen], in.hello[:84])
	h.SetConfirm(confirm(in.ck1, "connect", in.thc))
	return in, nil
}

// Hello is the AuthHello every CONNECT of the attempt carries.
func (in *Initiation) Hello() []byte { return in.hello[:] }

// Finish checks the ACCEPT whose HandshakeHeader is hs and whose key
// exchange is acc, and returns the connection's secrets. An ACCEPT that
// does not confirm is ErrFailed, and the attempt goes on.
func (in *Initiation) Finish(hs proto.HandshakeHeader, acc proto.AuthAccept) (Secrets, error) {
	ea := acc[:32]
	ee, err := x25519(in.eph, ea)
	if err != nil {
		return Secrets{}, err
	}
	ck2 := mix(in.ck1, ee)
	if in.cred.Method == MethodKeys {
		se, err := x25519(in.cred.Static, ea)
		if err != nil {
			return Secrets{}, err
		}
		ck2 = mix(ck2, se)
	}
	confirmC := proto.AuthHello(in.hello[:]).Confirm()
	tha := transcript(in.thc, confirmC[:], hs[:proto.HandshakeHeaderLen], ea)
	want := confirm(ck2, "accept", tha)
	got := acc.Confirm()
	if subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
		return Secrets{}, ErrFailed
	}
	ia, ai := directions(ck2, tha)
	return Secrets{Suite: in.suite, Send: ia, Recv: ai}, nil
}

// directions derives the two phase-0 secrets.
func directions(ck2, tha []byte) (ia, ai []byte) {
	return expandLabel(ck2, "i2a", tha, 32), expandLabel(ck2, "a2i", tha, 32)
}

// Response is an acceptor's half of a handshake: a CONNECT's AuthHello
// checked, and the ACCEPT that answers it.
type Response struct {
	suite     Suite
	ck2, thc  []byte
	hello     [proto.AuthHelloLen]byte
	accept    [proto.AuthAcceptLen]byte
	answered  bool
	secrets   Secrets
	initiator *ecdh.PublicKey
}

// Respond checks the AuthHello of a CONNECT whose HandshakeHeader is hs,
// and draws the acceptor's ephemeral key from random for its answer. A
// suite or method it does not serve is a *RefusedError; a hello that does
// not prove the credentials is ErrFailed.
func Respond(cred *Credentials, random io.Reader, hs proto.HandshakeHeader, hello proto.AuthHello) (*Response, error) {
	if err := cred.Check(); err != nil {
		return nil, err
	}
	suite := Suite(hello.Suite())
	if !suite.Known() {
		return nil, &RefusedError{DetailSuite, fmt.Sprintf("suite %d is not offered", uint8(suite))}
	}
	if Method(hello.Method()) != cred.Method {
		return nil, &RefusedError{DetailMethod, fmt.Sprintf("method %v, where this acceptor uses %v", Method(hello.Method()), cred.Method)}
	}
	r := &Response{suite: suite}
	copy(r.hello[:], hello[:proto.AuthHelloLen])
	ei := r.hello[4:36]
	var ck1, si []byte
	switch cred.Method {
	case MethodPSK:
		ck1 = mix(ck0[:], cred.PSK)
	case MethodKeys:
		es, err := x25519(cred.Static, ei)
		if err != nil {
			return nil, err
		}
		cke := mix(ck0[:], es)
		the := transcript(hs[:proto.HandshakeHeaderLen], r.hello[:36])
		a, err := suite.aead(expandLabel(cke, "static", the, suite.keyLen()))
		if err != nil {
			return nil, err
		}
		si, err = a.Open(nil, make([]byte, nonceLen), r.hello[36:84], the)
		if err != nil {
			return nil, ErrFailed
		}
		for _, p := range cred.Peers {
			if bytes.Equal(p.Bytes(), si) {
				r.initiator = p
			}
		}
		if r.initiator == nil {
			return nil, ErrFailed // a key this acceptor does not admit
		}
		ss, err := x25519(cred.Static, si)
		if err != nil {
			return nil, err
		}
		ck1 = mix(cke, ss)
	}
	r.thc = transcript(hs[:proto.HandshakeHeaderLen], r.hello[:84])
	want := confirm(ck1, "connect", r.thc)
	got := hello.Confirm()
	if subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
		return nil, ErrFailed
	}
	eph, err := newEphemeral(random)
	if err != nil {
		return nil, err
	}
	ee, err := x25519(eph, ei)
	if err != nil {
		return nil, err
	}
	r.ck2 = mix(ck1, ee)
	if cred.Method == MethodKeys {
		se, err := x25519(eph, si)
		if err != nil {
			return nil, err
		}
		r.ck2 = mix(r.ck2, se)
	}
	copy(r.accept[:32], eph.PublicKey().Bytes())
	return r, nil
}

// Same reports whether hello is byte for byte the one the response
// checked: a resent CONNECT must repeat it (spec section 13.3).
func (r *Response) Same(hello proto.AuthHello) bool {
	return len(hello) >= proto.AuthHelloLen && bytes.Equal(hello[:proto.AuthHelloLen], r.hello[:])
}

// Initiator is the initiator's static key with MethodKeys, and nil with a
// pre-shared key.
func (r *Response) Initiator() *ecdh.PublicKey { return r.initiator }

// Answer completes the schedule for the ACCEPT whose HandshakeHeader is
// hs. It returns the ACCEPT's key exchange and the acceptor's secrets. A
// second call returns the first one's answer, for the ACCEPT that answers
// a resent CONNECT.
func (r *Response) Answer(hs proto.HandshakeHeader) ([]byte, Secrets) {
	if r.answered {
		return r.accept[:], r.secrets
	}
	confirmC := proto.AuthHello(r.hello[:]).Confirm()
	tha := transcript(r.thc, confirmC[:], hs[:proto.HandshakeHeaderLen], r.accept[:32])
	proto.AuthAccept(r.accept[:]).SetConfirm(confirm(r.ck2, "accept", tha))
	ia, ai := directions(r.ck2, tha)
	r.secrets = Secrets{Suite: r.suite, Send: ai, Recv: ia}
	r.answered = true
	return r.accept[:], r.secrets
}
