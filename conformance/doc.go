// Package conformance checks that an implementation speaks the wire
// format of docs/spec.md as the spec says, judging it from the wire alone.
//
// It holds three suites. Cases drive a responder with the Prober, a
// requester written directly against package proto. The Prober opens a
// connection with a real handshake, sends crafted data packets with gaps,
// duplicates, bad keys, out-of-window DSNs, stale epochs, other versions,
// bad CRCs and PSNs that wrap, and checks every field of the ACKs and
// NACKs that come back. The responder needs no cooperation beyond
// listening and exposing a region it grants remote write on, whose key
// and length are the cases' input. SenderCases drive a requester with the
// SenderProbe, a responder that answers it packet by packet. RunnerCases
// run two implementations through an emulated fabric under the endpoint
// contract, and judge their reports against what the wire showed.
package conformance
