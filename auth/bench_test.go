package auth

import (
	"testing"

	"github.com/mroce/mroce/proto"
)

// BenchmarkSealOpen4K seals and opens one WRITE of 4 KiB of payload under
// each suite: the AEAD's cost per packet, sender's and receiver's
// together, that the authenticated mode adds (docs/results.md, "The
// authenticated mode on loopback").
func BenchmarkSealOpen4K(b *testing.B) {
	for _, suite := range []Suite{AES128GCM, ChaCha20Poly1305} {
		b.Run(suite.String(), func(b *testing.B) {
			k, err := NewKeys(suite, make([]byte, 32))
			if err != nil {
				b.Fatal(err)
			}
			var p proto.Packet
			if err := proto.BuildProtected(&p, make([]byte, 4200), proto.TypeWrite, 0, 4096); err != nil {
				b.Fatal(err)
			}
			pkt := p.Bytes()
			b.SetBytes(4096)
			for b.Loop() {
				k.Seal(pkt)
				if err := k.Open(pkt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
