// Package auth is the authenticated mode of docs/spec.md section 13: the
// key exchange that a CONNECT and its ACCEPT carry, the secrets it derives,
// and the protection of every later packet with an AEAD.
//
// The handshake (handshake.go) turns an endpoint's Credentials and the two
// HandshakeHeaders into one secret per direction. A Session (session.go)
// holds a connection's keys: it seals what the connection sends and opens
// what it receives, moves both directions to the next key phase together,
// and refuses a control packet it has opened before. Keys (keys.go) is one
// phase of one direction: the AEAD and the nonce rule of section 13.4.
//
// Nothing here reads a clock or a random source of its own: the caller
// passes both, so the same code runs on real sockets and in the
// deterministic simulator.
package auth
