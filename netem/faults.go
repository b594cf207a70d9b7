package netem

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/mroce/mroce/clock"
)

// scheduleFaults schedules faults already validated. Each fault fires on
// every process and changes the links that process runs. Over processes,
// the links also note the changes to come in Link.changes.
func (f *Fabric) scheduleFaults(faults []Fault) {
	for _, ft := range faults {
		for _, p := range f.procs {
			p.sched.At(clock.Time(ft.At), &faultEvent{f, ft, p})
		}
		if s, ok := ft.Kind.linkState(); ok && f.group != nil {
			at := max(clock.Time(ft.At), f.group.Now())
			for _, l := range f.links {
				if l.plane == ft.Plane && l.matches(ft.Link) {
					i := sort.Search(len(l.changes), func(i int) bool { return l.changes[i].at > at }) // after those at the same time, as the events fire
					l.changes = slices.Insert(l.changes, i, stateChange{at, s})
				}
			}
		}
	}
}

// faultEvent plays one scheduled fault on one process.
type faultEvent struct {
	fab   *Fabric
	fault Fault
	p     *proc
}

func (e *faultEvent) Fire() { e.fab.apply(e.fault, e.p) }

// apply plays a fault on process p. It changes the state of the links p runs
// and of the plane as p's hosts see it.
func (f *Fabric) apply(ft Fault, p *proc) {
	down := &p.planeDown[ft.Plane]
	wasDown := *down
	switch ft.Kind {
	case PlaneDown:
		*down = true
	case Repair:
		if ft.Link == nil {
			*down = false
		}
	}
	if *down != wasDown {
		defer f.notifyPlane(p, ft.Plane, !*down)
	}
	for _, l := range f.links {
		if l.p != p || l.plane != ft.Plane || !l.matches(ft.Link) {
			continue
		}
		switch ft.Kind {
		case PlaneDown:
			l.setState(linkDown)
		case PlaneBlackhole:
			l.setState(linkBlackhole)
		case LinkSlowdown:
			l.rate = max(1, int64(float64(l.cfg.Rate)*ft.Factor))
		case LinkMTU:
			l.mtu = ft.MTU
		case LinkLoss:
			l.loss = nil
			if ft.Loss != nil {
				l.loss = ft.Loss.clone()
			}
		case Repair:
			l.setState(linkUp)
			l.rate, l.mtu, l.loss = l.cfg.Rate, l.cfg.MTU, nil
			if lm := l.cfg.Impair.Loss; lm != nil {
				l.loss = lm.clone()
			}
		}
	}
}

// OnPlaneChange calls fn for every host, in host order, when a PlaneDown
// fault takes a plane down or a Repair brings it back. That is what the
// host's NIC sees as its port's link state. Over processes fn is called on
// the host's process. A blackholed plane does not look down, so fn is not
// called for it.
func (f *Fabric) OnPlaneChange(fn func(host, plane int, up bool)) {
	f.planeWatch = append(f.planeWatch, fn)
}

// notifyPlane tells the hosts of process p.
func (f *Fabric) notifyPlane(p *proc, plane int, up bool) {
	for _, fn := range f.planeWatch {
		for _, h := range f.hosts {
			if h.p == p {
				fn(h.id, plane, up)
			}
		}
	}
}

// After runs fn at time at on the fabric's goroutine, in order with the
// fabric's own events. A time in the past means now. It lets a caller look
// at the fabric when a fault takes effect.
func (f *Fabric) After(at time.Duration, fn func()) {
	if f.group != nil {
		panic("netem: After on a fabric over processes: on which?")
	}
	f.procs[0].sched.At(clock.Time(at), clock.Func(fn))
}

// ScheduleFault adds a fault at time at, or now if at is in the past. Over
// processes, call it between windows, for a time no earlier than
// FaultLeadTime. Each datagram on the wire of an uplink decided when it left
// whether it would arrive, so the fault must come after they all arrive.
// That is at most a datagram's serialization, a link delay and a reorder gap
// ahead.
func (f *Fabric) ScheduleFault(at time.Duration, ft Fault) error {
	ft.At = at
	if err := ft.validate(&f.cfg); err != nil {
		return fmt.Errorf("netem: %w", err)
	}
	if f.group != nil {
		if first := f.FaultLeadTime(ft); at < first {
			return fmt.Errorf("netem: a fault at %v over processes: the datagrams on the wires of its uplinks arrive until %v", at, first)
		}
	}
	f.scheduleFaults([]Fault{ft})
	return nil
}

// FaultLeadTime is the earliest time ScheduleFault accepts for ft. Over
// processes and between windows, that is after every datagram on the wire of
// an uplink whose state ft changes has arrived. On one clock, or for a
// slowdown, it is now.
func (f *Fabric) FaultLeadTime(ft Fault) time.Duration {
	if f.group == nil {
		return time.Duration(f.procs[0].sched.Now())
	}
	first := f.group.Now()
	if _, changes := ft.Kind.linkState(); !changes {
		return time.Duration(first)
	}
	for _, l := range f.links {
		if l.kind == Uplink && l.plane == ft.Plane && l.matches(ft.Link) {
			first = max(first, l.decided+1)
		}
	}
	return time.Duration(first)
}
