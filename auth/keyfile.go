package auth

import (
	"crypto/ecdh"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// Keys and pre-shared keys travel between people as text: 32 bytes as 64
// hexadecimal digits or as 44 characters of standard base64, as WireGuard
// writes its keys. FormatKey writes base64.

// ParseKey reads 32 bytes written as text.
func ParseKey(text string) ([]byte, error) {
	s := strings.TrimSpace(text)
	var b []byte
	var err error
	switch len(s) {
	case 64:
		b, err = hex.DecodeString(s)
	case 44:
		b, err = base64.StdEncoding.DecodeString(s)
	default:
		return nil, fmt.Errorf("auth: a key is 64 hexadecimal digits or 44 characters of base64, not %d characters", len(s))
	}
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("auth: not a 32-byte key: %q", s)
	}
	return b, nil
}

// FormatKey writes 32 bytes as ParseKey reads them.
func FormatKey(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// ParsePrivateKey reads an X25519 private key written as text.
func ParsePrivateKey(text string) (*ecdh.PrivateKey, error) {
	b, err := ParseKey(text)
	if err != nil {
		return nil, err
	}
	return ecdh.X25519().NewPrivateKey(b)
}

// ParsePublicKey reads an X25519 public key written as text.
func ParsePublicKey(text string) (*ecdh.PublicKey, error) {
	b, err := ParseKey(text)
	if err != nil {
		return nil, err
	}
	return ecdh.X25519().NewPublicKey(b)
}

// NewPrivateKey draws an X25519 key pair from random.
func NewPrivateKey(random io.Reader) (*ecdh.PrivateKey, error) { return newEphemeral(random) }
