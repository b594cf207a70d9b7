// Package endpoint will hold the verbs-style API (device, protection domain,
// memory registration, completion queue, connection with paths and streams)
// over a Backend interface, and the software backend: the protocol engine.
//
// Not built yet: this package has no code. The wire format it will speak is
// package proto, specified in docs/spec.md.
package endpoint
