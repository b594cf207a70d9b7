package proto

// Error is why Decode refused a packet: steps 1-6 of the spec's receiver
// validation order (section 9). Each is a silent, counted drop. Error is a
// small integer so that returning one never allocates: a flood of malformed
// packets costs no garbage. Compare with == or errors.Is.
type Error uint8

const (
	ErrTruncated    Error = iota + 1 // shorter than 32 bytes, or than its header and trailer
	ErrBadCRC                        // CRC32C trailer does not match
	ErrVersion                       // Version is not 0
	ErrUnknownType                   // Type is not defined
	ErrRecordCount                   // ACK RecordCount above 18
	ErrHeaderLength                  // HdrLen does not match the type
	ErrPayload                       // payload where none is allowed, or beyond MsgLen
	ErrBufferSize                    // Build: buffer too small or packet too large
	numErrors
)

// NumErrors bounds the Error values, for arrays of drop counters indexed by Error.
const NumErrors = int(numErrors)

var errorText = [numErrors]string{
	ErrTruncated:    "truncated",
	ErrBadCRC:       "bad CRC",
	ErrVersion:      "unsupported version",
	ErrUnknownType:  "unknown type",
	ErrRecordCount:  "bad ACK record count",
	ErrHeaderLength: "header length does not match type",
	ErrPayload:      "payload not allowed",
	ErrBufferSize:   "buffer size",
}

func (e Error) Error() string {
	if e > 0 && e < numErrors {
		return "mroce: " + errorText[e]
	}
	return "mroce: unknown decode error"
}
