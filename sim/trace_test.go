package sim

import (
	"testing"

	"github.com/mroce/mroce/engine"
)

// countTracer counts what it hears by kind. It is not safe for two
// goroutines: a run that traced from two at once fails under -race.
type countTracer map[engine.TraceKind]int

func (c countTracer) Trace(ev engine.TraceEvent) { c[ev.Kind]++ }

// A scenario's tracer hears its first run alone: the loss scenario at two
// rates, six runs, run two at a time, traces exactly what the transfer of
// its first run traces on its own. A traced run of flows stays on one
// clock.
func TestTracerHearsTheFirstRunAlone(t *testing.T) {
	o := DefaultLoss()
	o.Losses, o.Bytes, o.Jobs = []float64{0.01, 0.02}, 4<<20, 2
	scenario := countTracer{}
	o.Tracer = scenario
	if _, err := Loss(o); err != nil {
		t.Fatal(err)
	}
	cfg := TransferConfig{Bytes: o.Bytes, Planes: o.Planes, Paths: o.Paths, LinkRate: o.LinkRate, Links: o.Links, Loss: 0.01,
		Seed: o.Seed, Resend: o.Resend, BurstLen: o.BurstLen}
	alone := countTracer{}
	cfg.Tracer = alone
	if _, err := Transfer(cfg); err != nil {
		t.Fatal(err)
	}
	if scenario[engine.TraceSent] == 0 || scenario[engine.TraceLost] == 0 {
		t.Fatalf("the scenario's tracer heard %v", scenario)
	}
	for k := engine.TraceSent; k <= engine.TraceHint; k++ {
		if scenario[k] != alone[k] {
			t.Errorf("%v: the scenario traced %d, its first run alone %d", k, scenario[k], alone[k])
		}
	}

	f := DefaultFabric(4)
	f.Hosts = 8
	f.Tracer = countTracer{}
	if grouped(f, AllToAll(f.Hosts, 1<<20)) {
		t.Error("a traced run goes over processes, away from its tracer")
	}
}
