// Package proto is the mroce wire format, version 0, as docs/spec.md
// defines it. It reads, checks and writes packets, and nothing else.
//
// Headers are read and written through views. A view is a named []byte type
// whose accessors read and write big-endian fields at the offsets of the
// spec's layout tables, so decoding allocates nothing and copies nothing.
// Decode validates a packet in the receiver order of steps 1-6 in section 9
// of the spec, which checks length, CRC32C, version, type, header length and
// payload. It returns an Error naming the first failure. Build lays a packet
// out in a caller's buffer. The caller sets fields through the views, copies
// the payload into place and calls Seal to write the CRC.
//
// Field and type names match the spec exactly, and spec_test.go holds the
// two to each other. The package imports only the standard library.
package proto
