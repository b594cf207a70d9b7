package stub

import (
	"context"
	"errors"
	"testing"

	"github.com/mroce/mroce/endpoint"
)

// The stub backend reports its capabilities and refuses everything else
// with ErrNotSupported. A driver starts from that.
func TestStubBackend(t *testing.T) {
	dev := endpoint.Open(New(endpoint.Caps{Name: "example NIC", MaxPaths: 256, MaxStreams: 1024, MaxPacket: 4160, Planes: 8}))
	if c := dev.Caps(); c.MaxPaths != 256 || c.Planes != 8 || c.Name != "stub (no hardware): example NIC" {
		t.Fatalf("caps %+v", c)
	}
	if _, err := dev.AllocPD(); !errors.Is(err, endpoint.ErrNotSupported) {
		t.Fatalf("AllocPD: %v", err)
	}
	var b endpoint.Backend = New(endpoint.Caps{})
	if err := b.PostSend(nil, endpoint.SendWR{}); !errors.Is(err, endpoint.ErrNotSupported) {
		t.Fatalf("PostSend: %v", err)
	}
	if err := b.Progress(context.Background(), func() bool { return false }); !errors.Is(err, endpoint.ErrNotSupported) {
		t.Fatalf("Progress: %v", err)
	}
}
