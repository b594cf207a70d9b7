package engine

import (
	"bytes"
	"testing"
	"time"
)

// A path that never moves stays in one epoch however many packets it
// sends. Once it has sent 2^31 PSNs past the epoch's first, serial order
// (spec section 2) would put every new PSN before that first one, and
// every ACK record of the epoch would be ignored as older than its start
// (spec section 7.1): the connection would stall. The sender keeps the
// epoch's start near its next PSN instead. Here the paths' epochs begin
// that far back: the WRITE's ACK records are all taken, none ignored, and
// it ends with nothing resent.
func TestEpochLongerThanHalfThePSNSpace(t *testing.T) {
	n := newNet(t, twoHostFabric(2), Config{Paths: 4, Streams: 1, PlaceholderPayloads: false})
	pr := n.connect(0, 1)
	pr.a.snd.equip()
	for _, p := range pr.a.snd.paths {
		// The path's epoch began 2^31 + 1000 PSNs before its next.
		p.Init(p.ID(), p.Plane(), &pr.a.snd.ports, p.next-(1<<31+1000), p)
	}
	src, dst := postWrite(t, pr, 1<<20)
	if !n.run(100*time.Millisecond, func() bool { return len(pr.ra.done) == 1 }) {
		t.Fatalf("the WRITE did not complete: %+v", pr.a.SenderStats())
	}
	st := pr.a.SenderStats()
	if pr.ra.done[0].Status != StatusOK || !bytes.Equal(src.Bytes(), dst.Bytes()) {
		t.Fatalf("completion %+v; data equal %v", pr.ra.done[0], bytes.Equal(src.Bytes(), dst.Bytes()))
	}
	if st.BadAcks != 0 || st.Retransmits != 0 || st.Timeouts != 0 {
		t.Errorf("%d ACK records ignored, %d packets resent, %d timeouts; want none", st.BadAcks, st.Retransmits, st.Timeouts)
	}
}
