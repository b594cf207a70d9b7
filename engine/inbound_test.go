package engine

import "testing"

// The hold follows the share of marked arrivals on the plane marked most:
// none while they arrive clean, up to inboundHoldMost while all of one
// plane's are marked, however many arrive clean on another, and none again
// soon after the marks stop. It reports a change only in steps of
// inboundHoldStep, or to none, so that the shares are not recomputed at
// every arrival.
func TestInboundHoldFollowsTheMarks(t *testing.T) {
	var m inboundMarks
	for range 100 {
		if m.note(0, false) || m.note(1, false) {
			t.Fatal("clean arrivals changed the hold")
		}
	}
	changes, last := 0, 0.0
	for range 4000 {
		for _, plane := range []int{0, 0, 0, 1} {
			if !m.note(plane, plane == 1) {
				continue
			}
			changes++
			if d := m.hold - last; d < inboundHoldStep {
				t.Fatalf("the hold moved by %g, less than a step", d)
			}
			last = m.hold
		}
	}
	if m.hold == 0 || m.hold < inboundHoldMost-inboundHoldStep || m.hold > inboundHoldMost {
		t.Errorf("every arrival on plane 1 marked: hold %g, want within a step of %g", m.hold, inboundHoldMost)
	}
	if most := int(inboundHoldMost/inboundHoldStep) + 1; changes > most {
		t.Errorf("%d changes of the hold, more than %d", changes, most)
	}
	for range 4000 {
		m.note(1, false)
	}
	if m.hold != 0 {
		t.Errorf("4000 clean arrivals after the marks: hold %g, want 0", m.hold)
	}
}
