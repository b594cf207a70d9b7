package pcapio

import (
	"bytes"
	"os"
	"testing"

	"github.com/mroce/mroce/proto"
)

// FuzzReader feeds arbitrary files to the capture reader. It must return
// datagrams or errors and never panic, whatever the headers claim.
func FuzzReader(f *testing.F) {
	golden, err := os.ReadFile("../../testdata/golden.pcap")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden)
	f.Add(golden[:len(golden)/2])
	f.Add(golden[:24])
	var small bytes.Buffer
	if err := WritePackets(&small, [][]byte{{0x00, byte(proto.TypeCNP)}}); err != nil {
		f.Fatal(err)
	}
	f.Add(small.Bytes())
	f.Add([]byte{0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 28, 0x1a, 0x2b, 0x3c, 0x4d}) // a pcapng start
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data), proto.DefaultPort)
		if err != nil {
			return
		}
		for i := 0; i < 10000; i++ {
			d, err := r.Next()
			if err != nil {
				return
			}
			if len(d.Payload) > d.Length && d.Length >= 0 {
				t.Fatalf("payload %d bytes longer than the datagram's length %d", len(d.Payload), d.Length)
			}
		}
	})
}
