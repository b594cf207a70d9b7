// Package proto is the mroce wire format, version 0, as docs/spec.md defines it.
//
// Headers are read and written through views: named []byte types whose accessors
// read and write big-endian fields at the offsets of the spec's layout tables,
// so decoding allocates nothing and copies nothing. Decode validates a packet in
// the spec's receiver order (steps 1-6 of section 9: length, CRC32C, version,
// type, header length, payload) and returns an Error naming the first failure.
// Build lays a packet out in a caller's buffer; the caller sets fields through
// the views, copies the payload into place and calls Seal to write the CRC.
//
// Field and type names match the spec exactly; spec_test.go holds the two to
// each other. The package imports only the standard library.
package proto
