package conformance

import (
	"encoding/hex"
	"io"
	"testing"
)

// Data is the stream docs/conformance.md defines for another language to
// make: C2SP chacha8rand seeded with "conform", its first bytes as the
// page states them.
func TestDataIsTheDocumentedStream(t *testing.T) {
	b, err := io.ReadAll(Data(16))
	if err != nil || hex.EncodeToString(b) != "acd5beafc576070124f5130bcc693dab" {
		t.Fatalf("Data(16) = %x, %v", b, err)
	}
	if n, _ := io.Copy(io.Discard, Data(1000)); n != 1000 {
		t.Fatalf("Data(1000) gives %d bytes", n)
	}
}
