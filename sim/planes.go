package sim

import (
	"fmt"
	"slices"
	"time"
)

// PlanesOptions are the planes scenario's settings.
type PlanesOptions struct {
	Planes    []int
	Fabric    FabricOptions // its Planes is set for each run
	FlowBytes int           // every host to every other
	Jobs      int           // runs at once
}

// DefaultPlanes is the planes scenario of docs/results.md. It runs 64
// hosts all to all with 1 MiB each, on 1 to 8 planes of 100 Gb/s. A
// flow's first and last round trips cost the same on any number of
// planes. With much smaller flows they would weigh on an 8-plane run, and
// the ratio would measure them rather than the planes.
func DefaultPlanes() PlanesOptions {
	return PlanesOptions{Planes: []int{1, 2, 4, 8}, Fabric: DefaultFabric(1), FlowBytes: 1 << 20}
}

// PlanesResult is what the planes scenario measured, a row per count of
// planes.
type PlanesResult struct {
	Options PlanesOptions
	Rows    []PlanesRow
	// HeapShared is set when runs went side by side. A run's HeapBytes is
	// then not its own.
	HeapShared bool
}

// PlanesRow is the all-to-all on one count of planes.
type PlanesRow struct {
	Planes int
	Run    FlowsResult
	// Goodput is the aggregate in bytes/s. OfCapacity is it over every
	// host's payload rate over all its planes.
	Goodput, OfCapacity float64
	// VsHalf is Goodput over that of the run on half the planes, or 0
	// when there was none.
	VsHalf         float64
	FCTP50, FCTP99 time.Duration
}

// Planes measures how the aggregate throughput of an all-to-all scales
// with the planes, or NIC ports, every host has.
func Planes(o PlanesOptions) (PlanesResult, error) {
	flows := AllToAll(o.Fabric.Hosts, o.FlowBytes)
	results, err := runEach(o.Jobs, len(o.Planes), func(i int) (FlowsResult, error) {
		f := o.Fabric
		f.Planes = o.Planes[i]
		// A run of fewer planes has none of the links of the planes it
		// lacks.
		f.PlaneLinks = slices.DeleteFunc(slices.Clone(f.PlaneLinks), func(pl PlaneLink) bool { return pl.Plane >= f.Planes })
		if i > 0 {
			f.Tracer = nil // the first run's alone
		}
		r, err := RunFlows(f, flows, 0)
		if err != nil {
			err = fmt.Errorf("%d planes: %w", o.Planes[i], err)
		}
		return r, err
	})
	if err != nil {
		return PlanesResult{}, err
	}
	res := PlanesResult{Options: o, HeapShared: heapShared(o.Jobs)}
	byPlanes := map[int]float64{}
	for i, r := range results {
		p := o.Planes[i]
		g := r.Goodput(flows)
		byPlanes[p] = g
		row := PlanesRow{Planes: p, Run: r, Goodput: g, OfCapacity: g / (float64(o.Fabric.Hosts) * r.HostCapacity),
			FCTP50: Percentile(r.FCT, 0.5), FCTP99: Percentile(r.FCT, 0.99)}
		if h, ok := byPlanes[p/2]; ok && p%2 == 0 {
			row.VsHalf = g / h
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}
