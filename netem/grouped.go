package netem

import (
	"errors"
	"fmt"

	"github.com/mroce/mroce/clock/parallel"
)

// ErrNotGrouped is NewGrouped's refusal of a configuration that a fabric
// over processes cannot carry. The caller may build it on one clock instead.
var ErrNotGrouped = errors.New("netem: not a fabric over processes")

// NewGrouped builds a fabric whose hosts are the processes of g, one each,
// so g.Len() must equal cfg.Hosts. Host h's engine runs on g.LP(h), and so
// do its NIC's uplinks and the switch ports that feed it. A datagram thus
// crosses from one process to another on an uplink, a link delay after it
// left, and that delay must be at least g's lookahead. A fault is played on
// every process, each changing the links it runs at the fault's time.
//
// The fabric has one switch per plane, no PFC, no shared switch buffer, no
// trace and no taps but host taps. Each of those would share state between
// processes.
func NewGrouped(cfg Config, g *parallel.Group) (*Fabric, error) {
	switch {
	case g.Len() != cfg.Hosts:
		return nil, fmt.Errorf("netem: %d processes for %d hosts", g.Len(), cfg.Hosts)
	case cfg.HostsPerLeaf > 0 || cfg.FatTreeK > 0 || cfg.SinglePort || cfg.Trace:
		return nil, fmt.Errorf("%w: it has one switch per plane, no single-port hosts and no trace", ErrNotGrouped)
	case cfg.SharedBuffer != nil:
		return nil, fmt.Errorf("%w: a switch's shared buffer spans the processes of its hosts' downlinks", ErrNotGrouped)
	}
	if err := cfg.validate(); err != nil { // the faults too, since New is given none
		return nil, err
	}
	faults := cfg.Faults
	cfg.Faults = nil // scheduled once the processes are the hosts'
	f, err := New(cfg, g.LP(0))
	if err != nil {
		return nil, err
	}
	f.cfg.Faults = faults
	f.group = g
	g.Between(f.rebalance)
	f.procs = nil
	for h, host := range f.hosts {
		host.p = &proc{idx: h, sched: g.LP(h)}
		f.procs = append(f.procs, host.p)
	}
	for _, l := range f.links {
		switch {
		case l.pfc:
			return nil, fmt.Errorf("%w: it has no PFC", ErrNotGrouped)
		case l.kind == Uplink && l.cfg.Delay < g.Lookahead():
			return nil, fmt.Errorf("%w: uplink delay %v is shorter than the processes' lookahead %v", ErrNotGrouped, l.cfg.Delay, g.Lookahead())
		case l.kind == Uplink && l.cfg.Impair.Jitter > 0:
			return nil, fmt.Errorf("%w: it has no jitter on uplinks (a datagram could arrive sooner than the lookahead)", ErrNotGrouped)
		default:
			l.p = f.hosts[l.owner].p
		}
	}
	f.scheduleFaults(faults)
	return f, nil
}

// rebalance evens out the processes' pools between windows. A datagram is
// taken from the pool of the process that sends it and given back to that of
// the one it reaches. A process that receives more than it sends would
// otherwise keep what another has to make anew. A pool above poolHigh gives
// all but poolLow to the fabric's spare, and one below poolLow takes from it
// up to poolLow. That is more than a host sends in a window.
func (f *Fabric) rebalance() {
	for _, p := range f.procs {
		p.freePackets = balance(p.freePackets, &f.sparePackets)
		p.freeBufs = balance(p.freeBufs, &f.spareBufs)
		p.freeHeaders = balance(p.freeHeaders, &f.spareHeaders)
	}
}

const poolLow, poolHigh = 1024, 4096

func balance[T any](pool []T, spare *[]T) []T {
	switch n := len(pool); {
	case n > poolHigh:
		*spare = append(*spare, pool[poolLow:]...)
		clear(pool[poolLow:])
		return pool[:poolLow]
	case n < poolLow && len(*spare) > 0:
		k := min(poolLow-n, len(*spare))
		s := *spare
		pool = append(pool, s[len(s)-k:]...)
		clear(s[len(s)-k:])
		*spare = s[:len(s)-k]
	}
	return pool
}
