package pathmgr

import (
	"testing"
	"time"
)

func TestRTTFollowsRFC6298(t *testing.T) {
	var r RTT
	if got := r.RTO(time.Second, time.Millisecond, time.Minute); got != time.Second {
		t.Fatalf("RTO before samples = %v", got)
	}
	r.Update(100 * time.Microsecond)
	if r.SRTT != 100*time.Microsecond || r.RTTVar != 50*time.Microsecond || r.Min != 100*time.Microsecond {
		t.Fatalf("after the first sample: %+v", r)
	}
	r.Update(200 * time.Microsecond)
	// RTTVar = 50 + (100 - 50)/4 = 62.5, and SRTT = 100 + 100/8 = 112.5.
	if r.SRTT != 112500*time.Nanosecond || r.RTTVar != 62500*time.Nanosecond || r.Min != 100*time.Microsecond {
		t.Fatalf("after the second sample: %+v", r)
	}
	if got := r.RTO(time.Second, 0, time.Minute); got != 362500*time.Nanosecond {
		t.Fatalf("RTO = %v, want SRTT + 4 RTTVar = 362.5µs", got)
	}
	if got := r.RTO(time.Second, time.Millisecond, time.Minute); got != time.Millisecond {
		t.Fatalf("RTO under the floor = %v", got)
	}
	if got := r.RTO(time.Second, 0, 200*time.Microsecond); got != 200*time.Microsecond {
		t.Fatalf("RTO over the ceiling = %v", got)
	}
}

func TestECNFraction(t *testing.T) {
	tel := Telemetry{Counters: Counters{Acked: 200, CEMarks: 50}}
	if f := tel.ECNFraction(); f != 0.25 {
		t.Fatalf("ECN fraction %v", f)
	}
	if (Telemetry{}).ECNFraction() != 0 {
		t.Fatal("no acks: fraction not 0")
	}
}

func TestUtilization(t *testing.T) {
	if u := (Telemetry{InFlight: 12, Window: 16}).Utilization(); u != 0.75 {
		t.Fatalf("12 of 16 in flight: %v", u)
	}
	if u := (Telemetry{InFlight: 3}).Utilization(); u != 0 {
		t.Fatalf("no window: %v", u)
	}
}
