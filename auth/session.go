package auth

import (
	"errors"
	"time"

	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/proto"
)

// Limits of spec section 13.5.
const (
	// PhaseLimit is the most packets a sender seals under one phase's key.
	PhaseLimit = 1 << 23
	// UpdateAfter is when mroce moves to the next phase: half the limit,
	// so that the move has time to become allowed.
	UpdateAfter = 1 << 22
	// ReplayWindow is how many control sequence numbers below the highest
	// opened a receiver remembers (spec section 13.6).
	ReplayWindow = 1024
)

// Errors of a Session beyond proto.ErrAuthFailed.
var (
	// ErrReplay is a control packet opened before, or too old to tell.
	ErrReplay = errors.New("auth: control packet opened before")
	// ErrPhaseSpent is a packet that would go past PhaseLimit under one
	// key because the next phase is not yet allowed. It is not sent.
	ErrPhaseSpent = errors.New("auth: key phase spent and the next not yet allowed")
	// ErrForgeryLimit is a packet that failed to open when as many had
	// failed under the connection's keys as their suite's integrity limit
	// allows (spec section 13.5). The connection must end.
	ErrForgeryLimit = errors.New("auth: as many packets failed to open as the suite's integrity limit allows")
)

// forgeryLimit is the suite's integrity limit: how many packets may fail
// to open under a connection's keys before a forgery could succeed with
// a chance above 2^-57 (RFC 9001 section 6.6).
func (s Suite) forgeryLimit() uint64 {
	if s == ChaCha20Poly1305 {
		return 1 << 36
	}
	return 1 << 52
}

// Session is one connection's packet protection in the authenticated
// mode: its sending and receiving keys by phase, its control sequence
// number, and its control replay window. It is not safe for concurrent
// use; a connection's loop owns it.
type Session struct {
	suite Suite
	// MPL is the least time between two moves of phase that this side
	// starts (spec section 13.5).
	MPL time.Duration
	// UpdateAfter is the number of packets sealed in a phase after which
	// this side starts the next phase, once allowed. Tests lower it.
	UpdateAfter uint64
	limit       uint64 // PhaseLimit; tests lower it
	failed      uint64 // packets that did not open, over the connection's life
	forgeries   uint64 // the suite's forgeryLimit; tests lower it

	phase      uint64 // n
	sendSecret []byte // Secret_n of what this side sends
	send       *Keys
	recvTop    []byte   // Secret_{n+1} of what this side receives
	recv       [4]*Keys // by phase mod 4: n-1 (nil in phase 0), n, n+1
	sealed     uint64   // packets sealed in phase n
	heard      bool     // a packet of phase n from the peer has opened
	heardAt    clock.Time

	controlSeq uint32 // the next control packet's number
	ctlAny     bool
	ctlHighest uint32
	ctlSeen    [ReplayWindow / 64]uint64 // bit i: ctlHighest - i opened
}

// NewSession returns the protection of a connection whose handshake gave
// secrets.
func NewSession(s Secrets, mpl time.Duration) (*Session, error) {
	ss := &Session{suite: s.Suite, MPL: mpl, UpdateAfter: UpdateAfter, limit: PhaseLimit, forgeries: s.Suite.forgeryLimit(), sendSecret: s.Send}
	var err error
	if ss.send, err = NewKeys(s.Suite, s.Send); err != nil {
		return nil, err
	}
	if ss.recv[0], err = NewKeys(s.Suite, s.Recv); err != nil {
		return nil, err
	}
	ss.recvTop = NextSecret(s.Recv)
	if ss.recv[1], err = NewKeys(s.Suite, ss.recvTop); err != nil {
		return nil, err
	}
	return ss, nil
}

// Suite is the session's AEAD.
func (s *Session) Suite() Suite { return s.suite }

// Phase is the current key phase.
func (s *Session) Phase() uint64 { return s.phase }

// Seal protects pkt, laid out by proto.BuildProtected and filled: it sets
// KeyPhase and, for a control packet, the control sequence number in PSN,
// then encrypts in place and writes the tag. It first moves to the next
// phase when this side has sealed UpdateAfter packets and the move is
// allowed.
func (s *Session) Seal(pkt []byte, now clock.Time) error {
	if s.sealed >= s.UpdateAfter && s.mayMove(now) {
		if err := s.move(); err != nil {
			return err
		}
	}
	if s.sealed >= s.limit {
		return ErrPhaseSpent
	}
	h := proto.CommonHeader(pkt[:proto.CommonHeaderLen])
	h.SetKeyPhase(uint8(s.phase))
	if !h.Type().IsData() {
		h.SetPSN(s.controlSeq)
		s.controlSeq++
	}
	s.send.Seal(pkt)
	s.sealed++
	return nil
}

// Open checks and decrypts pkt in place (spec sections 13.4 to 13.6). It
// returns proto.ErrAuthFailed for a packet that does not open, its phase
// out of reach included, and ErrReplay for a control packet that opened
// before. A packet of the next phase moves this side to it.
func (s *Session) Open(pkt []byte, now clock.Time) error { return s.OpenTo(pkt, pkt, now) }

// OpenTo is Open with the packet opened into dst, as Keys.OpenTo does.
func (s *Session) OpenTo(dst, pkt []byte, now clock.Time) error {
	if len(pkt) < proto.MinProtectedLen {
		return proto.ErrTruncated
	}
	h := proto.CommonHeader(pkt[:proto.CommonHeaderLen])
	ahead := (h.KeyPhase() - uint8(s.phase)) & 3
	k := s.recv[h.KeyPhase()]
	if ahead == 2 || k == nil {
		return proto.ErrAuthFailed
	}
	if err := k.OpenTo(dst, pkt); err != nil {
		if s.failed++; s.failed >= s.forgeries {
			return ErrForgeryLimit
		}
		return err
	}
	h = proto.CommonHeader(dst[:proto.CommonHeaderLen])
	if !h.Type().IsData() && !s.fresh(h.PSN()) {
		return ErrReplay
	}
	switch ahead {
	case 1:
		if err := s.move(); err != nil {
			return err
		}
		s.heard, s.heardAt = true, now
	case 0:
		if !s.heard {
			s.heard, s.heardAt = true, now
		}
	}
	return nil
}

// OpenOwn opens a packet this side sealed, as the host hands back one it
// refused to send (a datagram too big for its path, say). Only a packet of
// the current phase opens: one sealed before a move is not looked into.
func (s *Session) OpenOwn(pkt []byte) error {
	if len(pkt) < proto.MinProtectedLen || uint64(proto.CommonHeader(pkt).KeyPhase()) != s.phase&3 {
		return proto.ErrAuthFailed
	}
	return s.send.Open(pkt)
}

// mayMove reports whether this side may start the next phase: it has
// heard its peer in this one, at least MPL ago.
func (s *Session) mayMove(now clock.Time) bool {
	return s.heard && now.Sub(s.heardAt) >= s.MPL
}

// move goes to phase n+1: new sending keys, and receiving keys for n, n+1
// and n+2, those of n-1 forgotten.
func (s *Session) move() error {
	next := NextSecret(s.sendSecret)
	send, err := NewKeys(s.suite, next)
	if err != nil {
		return err
	}
	top := NextSecret(s.recvTop)
	recv, err := NewKeys(s.suite, top)
	if err != nil {
		return err
	}
	s.phase++
	s.sendSecret, s.send = next, send
	s.recvTop = top
	s.recv[(s.phase+2)&3] = nil // two phases back: n-1 before the move
	s.recv[(s.phase+1)&3] = recv
	s.sealed, s.heard = 0, false
	return nil
}

// fresh records control sequence number n and reports whether it had not
// opened before and is within the window.
func (s *Session) fresh(n uint32) bool {
	if !s.ctlAny {
		s.ctlAny, s.ctlHighest = true, n
		s.ctlSeen[0] = 1
		return true
	}
	if proto.SeqLess(s.ctlHighest, n) {
		s.shift(n - s.ctlHighest)
		s.ctlHighest = n
		s.ctlSeen[0] |= 1
		return true
	}
	back := s.ctlHighest - n
	if back >= ReplayWindow {
		return false
	}
	word, bit := back/64, back%64
	if s.ctlSeen[word]&(1<<bit) != 0 {
		return false
	}
	s.ctlSeen[word] |= 1 << bit
	return true
}

// shift moves the window up by d numbers.
func (s *Session) shift(d uint32) {
	if d >= ReplayWindow {
		clear(s.ctlSeen[:])
		return
	}
	words, bits := int(d/64), d%64
	for i := len(s.ctlSeen) - 1; i >= 0; i-- {
		var v uint64
		if j := i - words; j >= 0 {
			v = s.ctlSeen[j] << bits
			if bits != 0 && j > 0 {
				v |= s.ctlSeen[j-1] >> (64 - bits)
			}
		}
		s.ctlSeen[i] = v
	}
}
