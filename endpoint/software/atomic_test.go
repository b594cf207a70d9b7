package software

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/mroce/mroce/endpoint"
)

// Two clients of one listener add to one counter of the server's domain
// through the verbs-like API, and compare-and-swap a second word: the
// counter ends at the sum, every FETCH_ADD fetched a different value, and
// one CMP_SWAP of the two found the word at 0.
func TestAtomicsThroughTheAPI(t *testing.T) {
	l := listenWith(t, endpoint.QPOptions{OwnCQs: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	target, err := l.spd.RegisterMR(make([]byte, 16), endpoint.LocalWrite|endpoint.RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	const each = 3 // the client's completion queue holds 8
	results, _ := l.cpd.RegisterMR(make([]byte, 2*(each+1)*8), endpoint.LocalWrite)
	for k := range 2 {
		qp, _ := l.connect(t, ctx)
		if !qp.Params().Atomics {
			t.Fatal("atomics not negotiated between two software endpoints")
		}
		base := uint64(k * (each + 1))
		for i := range uint64(each) {
			if err := qp.PostFetchAdd(base+i, 0, results.SGE((base+i)*8, 8), target.RKey(), 0, 3); err != nil {
				t.Fatal(err)
			}
		}
		if err := qp.PostCmpSwap(base+each, 0, results.SGE((base+each)*8, 8), target.RKey(), 8, 0, uint64(k+1)); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]endpoint.Completion, 8)
	seen := map[uint64]bool{}
	for done := 0; done < 2*(each+1); {
		k, err := l.ccq.Wait(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range out[:k] {
			if wc.Status != endpoint.StatusOK || wc.Bytes != 8 {
				t.Fatalf("completion %+v", wc)
			}
			if want := map[bool]endpoint.Opcode{true: endpoint.OpCmpSwap, false: endpoint.OpFetchAdd}[wc.ID%(each+1) == each]; wc.Op != want {
				t.Fatalf("completion %d is a %v, want %v", wc.ID, wc.Op, want)
			}
		}
		done += k
	}
	swapped := 0
	for k := range 2 {
		base := k * (each + 1)
		for i := range each {
			v := binary.BigEndian.Uint64(results.Bytes()[(base+i)*8:])
			if v%3 != 0 || v >= 2*each*3 || seen[v] {
				t.Fatalf("FETCH_ADD fetched %d: not a distinct multiple of 3 below the sum", v)
			}
			seen[v] = true
		}
		if binary.BigEndian.Uint64(results.Bytes()[(base+each)*8:]) == 0 {
			swapped++
		}
	}
	if got := binary.BigEndian.Uint64(target.Bytes()); got != 2*each*3 {
		t.Fatalf("counter %d, want %d", got, 2*each*3)
	}
	if w := binary.BigEndian.Uint64(target.Bytes()[8:]); swapped != 1 || w == 0 || w > 2 {
		t.Fatalf("%d CMP_SWAPs found the word at 0, and it holds %d", swapped, w)
	}
}
