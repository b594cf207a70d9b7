package proto

// Serial-number arithmetic, after RFC 1982, applies to every 32-bit
// sequence number and timestamp on the wire. Those are PSN, DSN, MSN, RSN,
// Timestamp and CECount, described in section 2 of the spec. Values wrap
// modulo 2^32. a is before b when b-a, read as a signed 32-bit integer, is
// positive. Two values exactly 2^31 apart are unordered, and neither is
// before the other. Protocol windows stay below 2^31 so that this never
// happens in practice.

// SeqDiff returns b - a as a signed distance, positive when b is after a.
func SeqDiff(a, b uint32) int32 { return int32(b - a) }

// SeqLess reports whether a is strictly before b.
func SeqLess(a, b uint32) bool {
	d := b - a
	return d != 0 && d < 1<<31
}

// SeqLessEq reports whether a is before b or equal to it.
func SeqLessEq(a, b uint32) bool { return a == b || SeqLess(a, b) }

// SeqMax returns the later of a and b, or a when they are unordered.
func SeqMax(a, b uint32) uint32 {
	if SeqLess(a, b) {
		return b
	}
	return a
}

// EpochRelation says how a packet's 2-bit path epoch relates to the
// receiver's current epoch of that path, as section 6.3 of the spec defines.
type EpochRelation uint8

const (
	EpochCurrent   EpochRelation = iota // the same epoch, so record the PSN
	EpochNext                           // the sender repathed, so reset the path state
	EpochAmbiguous                      // two epochs apart, so drop
	EpochPrevious                       // a late packet of the old route, to process but not record
)

// CompareEpoch classifies epoch e of a packet against the current epoch cur.
func CompareEpoch(e, cur uint8) EpochRelation { return EpochRelation((e - cur) & 3) }

func (r EpochRelation) String() string {
	switch r {
	case EpochCurrent:
		return "current"
	case EpochNext:
		return "next"
	case EpochAmbiguous:
		return "ambiguous"
	default:
		return "previous"
	}
}
