// Package bugs makes deliberately broken endpoints for the conformance
// suite's self-test. A broken endpoint is a correct engine behind a port
// that rewrites what it sends and receives as a buggy implementation
// would. The engine thus has no broken mode of its own, and the suite is
// checked against bugs it must tell apart, as docs/conformance.md
// describes.
package bugs

import (
	"fmt"
	"sort"
	"strings"
)

// Set is a set of deliberate bugs. Each is named for what a peer sees.
type Set struct {
	// IgnoreSACKBit makes ACK records never report the PSN just below the
	// highest. Bit 0 of the bitvector of spec section 5.5 stays clear.
	IgnoreSACKBit bool
	// AcceptBadCRC takes packets whose CRC of spec section 5.11 is wrong
	// as if it were right, so corrupt ones are placed.
	AcceptBadCRC bool
	// SkipKeyCheck sends no NACK for a packet refused for a bad key,
	// against spec section 7.
	SkipKeyCheck bool
	// ReusePSN sends every 64th data packet of a path, when it is a first
	// transmission, with the PSN of the packet before it on that path.
	// The PSN is then used twice, which spec section 6.2 forbids.
	ReusePSN bool
	// IgnoreRetryAfter resends a packet refused with a retryable NACK,
	// RNR or RESOURCE, at once, whatever RetryAfter asked.
	IgnoreRetryAfter bool
	// IgnoreCE keeps from the sender the CE marks its peer echoes, so it
	// neither shrinks its windows nor steers away from marked paths.
	IgnoreCE bool
	// MiscountCE makes the receiver leave out of its CECount the CE marks
	// of data packets whose PSN is a multiple of 16.
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
