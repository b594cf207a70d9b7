package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/mroce/mroce/proto"
)

// Suite is the AEAD that protects a connection's packets (spec section
// 13.1).
type Suite uint8

const (
	AES128GCM        Suite = 1
	ChaCha20Poly1305 Suite = 2
)

func (s Suite) String() string {
	switch s {
	case AES128GCM:
		return "AES-128-GCM"
	case ChaCha20Poly1305:
		return "ChaCha20-Poly1305"
	}
	return fmt.Sprintf("suite(%d)", uint8(s))
}

// Known reports whether the suite is one section 13.1 defines.
func (s Suite) Known() bool { return s == AES128GCM || s == ChaCha20Poly1305 }

// keyLen is the AEAD's key length in bytes.
func (s Suite) keyLen() int {
	if s == ChaCha20Poly1305 {
		return chacha20poly1305.KeySize
	}
	return 16
}

// aead returns the suite's AEAD under key.
func (s Suite) aead(key []byte) (cipher.AEAD, error) {
	switch s {
	case AES128GCM:
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		return cipher.NewGCM(block)
	case ChaCha20Poly1305:
		return chacha20poly1305.New(key)
	}
	return nil, fmt.Errorf("auth: unknown suite %d", uint8(s))
}

// nonceLen is the nonce length of both suites.
const nonceLen = 12

// Keys are one key phase of one direction: the AEAD under Key_n and IV_n
// (spec section 13.5). A Keys is not safe for concurrent use: it keeps the
// nonce it builds, so that sealing and opening allocate nothing.
type Keys struct {
	aead  cipher.AEAD
	iv    [nonceLen]byte
	nonce [nonceLen]byte
}

// NewKeys derives a phase's key and IV from its secret.
func NewKeys(suite Suite, secret []byte) (*Keys, error) {
	a, err := suite.aead(expandLabel(secret, "key", nil, suite.keyLen()))
	if err != nil {
		return nil, err
	}
	k := &Keys{aead: a}
	copy(k.iv[:], expandLabel(secret, "iv", nil, nonceLen))
	return k, nil
}

// NextSecret is the secret of the phase after the one of secret.
func NextSecret(secret []byte) []byte { return expandLabel(secret, "ku", nil, 32) }

// nonceFor builds the nonce of the packet whose common header is h: the IV
// XOR the packet's class, path and PSN (spec section 13.4).
func (k *Keys) nonceFor(h proto.CommonHeader) []byte {
	k.nonce = k.iv
	if h.Type().IsData() {
		k.nonce[5] ^= h.PathID()
	} else {
		k.nonce[4] ^= 1
	}
	psn := h.PSN()
	k.nonce[8] ^= byte(psn >> 24)
	k.nonce[9] ^= byte(psn >> 16)
	k.nonce[10] ^= byte(psn >> 8)
	k.nonce[11] ^= byte(psn)
	return k.nonce[:]
}

// Seal encrypts, in place, a packet laid out by proto.BuildProtected and
// filled: every byte after the common header but the tag's, which it then
// writes. The common header, KeyPhase and PSN included, must be final.
func (k *Keys) Seal(pkt []byte) {
	h := proto.CommonHeader(pkt[:proto.CommonHeaderLen])
	plain := pkt[proto.CommonHeaderLen : len(pkt)-proto.TagLen]
	k.aead.Seal(plain[:0], k.nonceFor(h), plain, h)
}

// Open checks a protected packet's tag and decrypts it in place. On
// failure the packet's bytes are unspecified and it must be dropped.
func (k *Keys) Open(pkt []byte) error { return k.OpenTo(pkt, pkt) }

// OpenTo checks a protected packet's tag and writes the packet opened to
// dst, which is pkt itself or as long and apart from it: the common header
// copied, the rest decrypted, the tag's bytes left as they were. On
// failure dst's bytes are unspecified.
func (k *Keys) OpenTo(dst, pkt []byte) error {
	if len(pkt) < proto.MinProtectedLen || len(dst) < len(pkt) {
		return proto.ErrTruncated
	}
	h := proto.CommonHeader(pkt[:proto.CommonHeaderLen])
	sealed := pkt[proto.CommonHeaderLen:]
	if _, err := k.aead.Open(dst[proto.CommonHeaderLen:proto.CommonHeaderLen], k.nonceFor(h), sealed, h); err != nil {
		return proto.ErrAuthFailed
	}
	copy(dst, h)
	return nil
}
