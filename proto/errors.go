package proto

// Error is why Decode refused a packet, one of steps 1-6 of the spec's
// receiver validation order in section 9. Each is a silent, counted drop.
// Error is a small integer so that returning one never allocates, and a
// flood of malformed packets costs no garbage. Compare with == or errors.Is.
type Error uint8

const (
	ErrTruncated    Error = iota + 1 // shorter than 32 bytes, or than its header and trailer
	ErrBadCRC                        // CRC32C trailer does not match
	ErrVersion                       // Version is not 0
	ErrUnknownType                   // Type is not defined
	ErrRecordCount                   // ACK RecordCount above 18
	ErrHeaderLength                  // HdrLen does not match the type
	ErrPayload                       // payload where none is allowed, or beyond MsgLen
	ErrBufferSize                    // Build's buffer is too small or the packet too large
	ErrProtected                     // a protected packet, which only its connection's keys open
	ErrAuthFailed                    // a protected packet that does not open under its connection's keys
	numErrors
)

// NumErrors bounds the Error values, for arrays of drop counters indexed by Error.
const NumErrors = int(numErrors)

var errorNames = [numErrors][2]string{
	ErrTruncated:    {"truncated", "packet truncated"},
	ErrBadCRC:       {"bad-crc", "CRC32C trailer does not match"},
	ErrVersion:      {"bad-version", "unsupported wire format version"},
	ErrUnknownType:  {"unknown-type", "unknown packet type"},
	ErrRecordCount:  {"bad-record-count", "ACK record count above 18"},
	ErrHeaderLength: {"bad-header-length", "header length does not match the type"},
	ErrPayload:      {"bad-payload", "payload not allowed for the type, or beyond its message"},
	ErrBufferSize:   {"buffer-size", "buffer too small for the packet, or packet too large"},
	ErrProtected:    {"protected", "protected packet, which only its connection's keys open"},
	ErrAuthFailed:   {"auth-failed", "protected packet does not open under its connection's keys"},
}

// Name is the drop cause as docs/spec.md section 9 names it, for counters.
func (e Error) Name() string {
	if e > 0 && e < numErrors {
		return errorNames[e][0]
	}
	return "unknown"
}

func (e Error) Error() string {
	if e > 0 && e < numErrors {
		return "proto: " + errorNames[e][1]
	}
	return "proto: unknown decode error"
}
