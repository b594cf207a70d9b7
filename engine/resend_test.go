package engine

import (
	"testing"
	"time"

	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/netem"
)

// TestResendPolicyChoosesThePath checks pickPath's choice for a resend.
// With ResendOtherPath it is the usable path on another plane, never the
// one that lost the packet while another can take it; with ResendSamePath
// it is the path that lost it, and another once that one's window is
// full.
func TestResendPolicyChoosesThePath(t *testing.T) {
	for _, policy := range []ResendPolicy{ResendOtherPath, ResendSamePath} {
		n := newNet(t, fourPlanes(), Config{Paths: 8, Resend: policy})
		pr := n.connect(0, 1)
		s := &pr.a.snd
		s.equip() // paths are made with the first post
		lost := s.paths[5]
		p := s.pickPath(int(lost.ID()))
		switch {
		case p == nil:
			t.Fatalf("%v: no path for a resend on an idle connection", policy)
		case policy == ResendOtherPath && p.Plane() == lost.Plane():
			t.Fatalf("%v: resent on plane %d, the plane that lost it, with others free", policy, p.Plane())
		case policy == ResendSamePath && p != lost:
			t.Fatalf("%v: resent on path %d, not on path %d that lost it and can take it", policy, p.ID(), lost.ID())
		}
		lost.inflight = lost.window // full: it cannot take the resend
		if p := s.pickPath(int(lost.ID())); p == nil || p == lost {
			t.Fatalf("%v: a resend went to a full path, or nowhere", policy)
		}
	}
}

// TestResendPolicy runs a transfer under loss with each policy. Every
// byte arrives. With ResendSamePath most resends go on the path that sent
// the DSN before; with ResendOtherPath those that do are the ones no other
// path had room for, in a transfer that keeps every window full.
func TestResendPolicy(t *testing.T) {
	skipUnderRace(t)
	for _, policy := range []ResendPolicy{ResendOtherPath, ResendSamePath} {
		t.Run(policy.String(), func(t *testing.T) {
			fc := fourPlanes()
			fc.Downlink.Impair.Loss = &netem.RandomLoss{P: 0.02}
			log := &traceLog{}
			n := newNet(t, fc, Config{Paths: 8, Tracer: log, Resend: policy})
			pr := n.connect(0, 1)
			log.conn, log.evs = pr.a.ID(), nil
			const size = 32 << 20
			src := pr.ha.region(t, size, 3, memreg.LocalWrite)
			dst := pr.hb.region(t, size, 0, memreg.LocalWrite|memreg.RemoteWrite)
			pr.a.Post(SendWR{ID: 1, Op: OpWrite, Local: SGE{src, 0, size}, RKey: dst.Key()})
			if !n.run(time.Second, func() bool { return len(pr.ra.done) == 1 }) || digest(src.Bytes()) != digest(dst.Bytes()) {
				t.Fatal("the transfer did not complete intact")
			}
			lastPath := map[uint32]int{}
			var resends, samePath, samePlane int
			for _, ev := range log.evs {
				if ev.Kind != TraceSent {
					continue
				}
				if from, ok := lastPath[ev.DSN]; ok && ev.Retransmit && !ev.Probe {
					resends++
					if from == ev.Path {
						samePath++
					}
					if pr.a.snd.paths[from].Plane() == pr.a.snd.paths[ev.Path].Plane() {
						samePlane++
					}
				}
				lastPath[ev.DSN] = ev.Path
			}
			t.Logf("%v: %d resends, %d on the path that sent the DSN before, %d on its plane", policy, resends, samePath, samePlane)
			if resends < 50 {
				t.Fatalf("%d resends: the loss shows nothing", resends)
			}
			if policy == ResendSamePath && samePath*10 < resends*8 {
				t.Fatalf("%d of %d resends on the path that sent the DSN before", samePath, resends)
			}
		})
	}
}
