// Package bugs makes deliberately broken endpoints for the conformance
// suite's self-test. A broken endpoint is a correct engine behind a port
// that rewrites what it sends and receives as a buggy implementation
// would, so the engine has no broken mode of its own and the suite is
// checked against bugs it must tell apart (docs/conformance.md).
package bugs

import (
	"fmt"
	"sort"
	"strings"
)

// Set is a set of deliberate bugs. Each is named for what a peer sees.
type Set struct {
	// IgnoreSACKBit: ACK records never report the PSN just below the
	// highest; bit 0 of the bitvector stays clear (spec section 5.5).
	IgnoreSACKBit bool
	// AcceptBadCRC: packets whose CRC is wrong are taken as if it were
	// right, so corrupt ones are placed (spec section 5.11).
	AcceptBadCRC bool
	// SkipKeyCheck: a packet refused for a bad key gets no NACK (spec
	// section 7).
	SkipKeyCheck bool
	// ReusePSN: a path's 64th, 128th, ... data packet, when it is a first
	// transmission, goes out with the PSN of the packet before it on that
	// path, used twice (spec section 6.2 forbids it).
	ReusePSN bool
	// IgnoreRetryAfter: a packet refused with a retryable NACK (RNR,
	// RESOURCE) is resent at once, whatever RetryAfter asked.
	IgnoreRetryAfter bool
	// IgnoreCE: the sender never learns of the CE marks its peer echoes,
	// so it neither shrinks its windows nor steers away from marked paths.
	IgnoreCE bool
	// MiscountCE: the receiver leaves out of its CECount the CE marks of
	// data packets whose PSN is a multiple of 16.
	MiscountCE bool
}

// byName maps each bug's name, as MROCE_BREAK and the docs give it, to its
// field.
func (s *Set) byName() map[string]*bool {
	return map[string]*bool{
		"ignore-sack-bit": &s.IgnoreSACKBit, "accept-bad-crc": &s.AcceptBadCRC, "skip-key-check": &s.SkipKeyCheck,
		"reuse-psn": &s.ReusePSN, "ignore-retry-after": &s.IgnoreRetryAfter, "ignore-ce": &s.IgnoreCE,
		"miscount-ce": &s.MiscountCE,
	}
}

// Names lists every bug's name.
func Names() []string {
	var s Set
	var names []string
	for n := range s.byName() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Empty reports whether the set has no bug.
func (s Set) Empty() bool { return s == Set{} }

// ForRole reads a comma-separated list of ROLE:BUG entries, ROLE
// requester or responder and BUG one of Names, and returns the bugs of
// role. It is the format of MROCE_BREAK, the self-test's environment
// variable.
func ForRole(spec, role string) (Set, error) {
	var s Set
	flags := s.byName()
	for _, f := range strings.Split(spec, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, bug, ok := strings.Cut(f, ":")
		if !ok || (r != "requester" && r != "responder") {
			return Set{}, fmt.Errorf("%q: want ROLE:BUG, ROLE requester or responder", f)
		}
		flag, known := flags[bug]
		if !known {
			return Set{}, fmt.Errorf("%q: no such bug (%s)", f, strings.Join(Names(), ", "))
		}
		if r == role {
			*flag = true
		}
	}
	return s, nil
}
