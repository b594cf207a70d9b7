package auth

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"hash"
)

// The primitives of spec section 13.1.

// ck0 is the chaining key every handshake starts from.
var ck0 = sha256.Sum256([]byte("mroce auth v0"))

// expandLabel is HKDF-Expand with TLS 1.3's HkdfLabel, "mroce " in place of
// "tls13 ".
func expandLabel(secret []byte, label string, context []byte, length int) []byte {
	full := "mroce " + label
	info := make([]byte, 0, 4+len(full)+len(context))
	info = append(info, byte(length>>8), byte(length), byte(len(full)))
	info = append(info, full...)
	info = append(info, byte(len(context)))
	info = append(info, context...)
	out, err := hkdf.Expand(sha256.New, secret, string(info), length)
	if err != nil {
		panic("auth: HKDF-Expand: " + err.Error()) // lengths here are far below its limit
	}
	return out
}

// mix is HKDF-Extract with the chaining key as its salt: the next chaining
// key.
func mix(ck []byte, ikm []byte) []byte {
	out, err := hkdf.Extract(sha256.New, ikm, ck)
	if err != nil {
		panic("auth: HKDF-Extract: " + err.Error())
	}
	return out
}

// confirm is the first 16 bytes of an HMAC of the transcript under a key
// from the chaining key.
func confirm(ck []byte, label string, th []byte) (out [16]byte) {
	m := hmac.New(sha256.New, expandLabel(ck, label, nil, 32))
	m.Write(th)
	copy(out[:], m.Sum(nil))
	return out
}

// transcript hashes its parts in order.
func transcript(parts ...[]byte) []byte {
	var h hash.Hash = sha256.New()
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}
