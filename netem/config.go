package netem

import (
	"errors"
	"fmt"
	"time"
)

// Config describes a fabric. It gives the hosts, the planes, the topology of
// each plane, the links of each kind and the faults to play. Every plane has
// the same topology. Rates are bits per second and sizes are bytes. Times
// are durations of virtual time, or of wall-clock time in real-time mode.
type Config struct {
	// Seed fixes every random choice, which are the ECMP hash keys and each
	// link's random stream. The same Config and Seed give the same run.
	Seed uint64
	// Hosts is the number of hosts, 1 .. 65,536.
	Hosts int
	// Planes is the number of planes, 1 .. 8. Every host has one NIC port
	// on each plane, with its own address given by Addr.
	Planes int
	// HostsPerLeaf, when > 0, makes each plane a two-tier leaf-spine. Hosts
	// h with the same h/HostsPerLeaf share a leaf, and every leaf connects
	// to every one of Spines spines. When 0, each plane is a single switch.
	HostsPerLeaf int
	Spines       int
	// FatTreeK, when > 0, makes each plane a three-tier fat tree of
	// switches with k ports: k pods, each of k/2 edge switches (leaves) of
	// k/2 hosts and k/2 aggregation switches, every edge switch joined to
	// every aggregation switch of its pod, and (k/2)^2 core switches, core
	// c joined to aggregation switch c/(k/2) of every pod. Hosts h with the
	// same h/(k/2) share an edge switch. k is even, at most 64, and the
	// tree holds at most k^3/4 hosts. It takes the place of HostsPerLeaf
	// and Spines. Traffic between hosts of one edge switch turns there,
	// within a pod at an aggregation switch, and between pods at a core
	// switch, ECMP picking the aggregation switch at the edge and the core
	// at the aggregation switch.
	FatTreeK int
	// SinglePort gives every host one NIC port, with its plane-0 address,
	// instead of one per plane. Its leaf connects to the spines of every
	// plane, and the leaf's ECMP hash of the 5-tuple picks the plane along
	// with the spine. It needs a leaf-spine. Plane faults then hit only
	// spine links.
	SinglePort bool
	// Link settings by kind. Uplinks go from a host to its leaf or switch,
	// and Downlinks from there to the host. FabricUp goes from leaf to
	// spine, and FabricDown from spine to leaf; in a fat tree, from edge to
	// aggregation switch and back. CoreUp goes from aggregation to core
	// switch and CoreDown back, in a fat tree only.
	Uplink, Downlink, FabricUp, FabricDown, CoreUp, CoreDown LinkConfig
	// Overrides replace the settings of the links they match, in order, so
	// the last match wins. One may give a plane longer delays, or slow a
	// single link.
	Overrides []Override
	// SharedBuffer, when set, gives every switch one packet buffer that its
	// output queues share. A host's NIC port keeps its own queue.
	SharedBuffer *SharedBuffer
	// MaxDatagram is the largest UDP payload the fabric carries, and the
	// capacity of the buffers Host.Buffer hands out. It defaults to 9,000.
	MaxDatagram int
	// Faults are played at their times.
	Faults []Fault
	// Trace, when set, hashes every link event into Fabric.TraceHash, to
	// prove two runs identical.
	Trace bool
}

// LinkConfig is one direction of a link, with its rate, delay, queue and
// impairments.
type LinkConfig struct {
	// Rate is in bits per second and must be positive.
	Rate int64
	// Delay is the propagation delay.
	Delay time.Duration
	// Overhead is added to each datagram's size for serialization. It
	// covers the IP, UDP and Ethernet headers, the FCS, the preamble and the
	// inter-frame gap. Zero means DefaultOverhead, and a negative value none.
	Overhead int
	// MTU, when > 0, is the largest datagram (UDP payload) the link
	// carries. A larger one is dropped, as a router drops a packet with DF
	// set that does not fit, and no error goes back.
	MTU    int
	Queue  QueueConfig
	Impair Impairments
}

// QueueConfig is a link's output queue.
type QueueConfig struct {
	// Limit is the queue's capacity in bytes of datagram sizes, without
	// overhead. A datagram that does not fit is tail-dropped. Zero means
	// unlimited.
	Limit int
	// ECNThreshold, when > 0, is DCTCP-style step marking. An ECN-capable
	// datagram that arrives to a queue holding more than ECNThreshold bytes
	// is marked CE. A Not-ECT one is queued unmarked.
	ECNThreshold int
	// ECNRamp, when set, marks on dequeue: an ECN-capable datagram leaving
	// a queue that still holds q bytes is marked CE with a probability
	// rising linearly from 0 at Min to 1 at Max, as the Ultra Ethernet
	// simulator marks.
	ECNRamp *ECNRamp
	// RED, when set, is Random Early Detection on the average queue.
	RED *RED
	// PFC, when set, makes the link lossless. The node it feeds pauses it.
	PFC *PFC
}

// SharedBuffer is a switch's packet memory, shared by its output queues
// under a dynamic threshold (Choudhury and Hahne, 1998), as switch chips
// share theirs. A queue takes a datagram only while it holds less than
// Alpha times the bytes of the buffer still free, and while the datagram
// fits in what is free. One congested queue then takes at most
// Alpha/(1+Alpha) of the buffer, and each of n congested queues
// Alpha/(1+n·Alpha), so a burst on one port leaves room for the others.
// Every queue's own Limit holds as well. A datagram refused is dropped with
// DropSharedBuffer.
type SharedBuffer struct {
	Bytes int
	Alpha float64
}

// ECNRamp is marking on dequeue between two queue lengths in bytes.
type ECNRamp struct{ Min, Max int }

// RED is Random Early Detection, after Floyd and Jacobson, over an
// exponentially weighted average of the queue in bytes. Below MinThreshold
// nothing happens. Between MinThreshold and MaxThreshold the probability
// rises linearly to MaxProb, and above MaxThreshold every datagram is hit. A
// hit marks CE if ECN is set and the datagram is ECN-capable, and drops the
// datagram otherwise.
type RED struct {
	MinThreshold, MaxThreshold int
	MaxProb                    float64
	// Weight of the newest sample in the average, in (0, 1]. It defaults to
	// 0.002.
	Weight float64
	ECN    bool
}

// PFC is priority flow control on a link, as one lossless class. The node
// the link feeds counts the bytes that came in on it and still sit in its
// output queues. Above XOff it pauses the link, and at or below XOn it
// resumes it. A pause or resume takes effect one link delay after it is
// decided. A paused link finishes the datagram on the wire and sends nothing
// more. Its own queue grows and in turn pauses the links that feed it.
type PFC struct{ XOff, XOn int }

// Impairments of one link direction, modelled on Linux netem.
type Impairments struct {
	// Loss, when set, decides which datagrams the link loses on the wire,
	// after they took its time.
	Loss LossModel
	// Jitter is added to Delay. It is a random amount from Distribution,
	// with Jitter as its scale. Datagrams keep their order unless Reorder is
	// set.
	Jitter       time.Duration
	Distribution Distribution
	// Reorder is the probability that a datagram is held back by ReorderGap
	// beyond its delay, so later datagrams overtake it. Off by default.
	Reorder    float64
	ReorderGap time.Duration
	// Duplicate is the probability that a datagram is sent twice.
	Duplicate float64
	// Corrupt is the probability that one random bit of a datagram is flipped.
	Corrupt float64
}

// Distribution is the shape of the delay jitter.
type Distribution uint8

const (
	// Uniform jitter lies in [-Jitter, +Jitter].
	Uniform Distribution = iota
	// Normal jitter has standard deviation Jitter.
	Normal
	// Pareto jitter is Jitter × (X - 1), where X is Pareto with shape 3 and
	// scale 2/3. Its mean is 0 and its heavy tail is on the late side.
	Pareto
)

// FaultKind is what a Fault does.
type FaultKind uint8

const (
	// PlaneDown takes every link of a plane down. They drop everything, and
	// the hosts see the plane down in Fabric.PlaneUp.
	PlaneDown FaultKind = iota + 1
	// PlaneBlackhole makes every link of a plane drop everything silently.
	// The plane still looks up.
	PlaneBlackhole
	// LinkSlowdown multiplies the rate of the matching links by Factor.
	LinkSlowdown
	// Repair undoes every fault on the plane, or on the matching links.
	Repair
	// LinkMTU sets the largest datagram the matching links carry to MTU,
	// as a route that comes to cross a tunnel does. Larger ones are
	// dropped, with no error sent back.
	LinkMTU
	// LinkLoss gives the matching links the loss model Loss from now on.
	LinkLoss
)

func (k FaultKind) String() string {
	switch k {
	case PlaneDown:
		return "plane-down"
	case PlaneBlackhole:
		return "plane-blackhole"
	case LinkSlowdown:
		return "link-slowdown"
	case Repair:
		return "repair"
	case LinkMTU:
		return "link-mtu"
	case LinkLoss:
		return "link-loss"
	}
	return fmt.Sprintf("FaultKind(%d)", uint8(k))
}

// Fault is a change to the fabric at a time.
type Fault struct {
	At    time.Duration
	Kind  FaultKind
	Plane int
	// Link selects links of the plane for LinkSlowdown, LinkMTU and
	// Repair. Nil means every link of the plane.
	Link *LinkMatch
	// Factor for LinkSlowdown, in (0, 1].
	Factor float64
	// MTU for LinkMTU: the largest datagram (UDP payload), 0 for any.
	MTU int
	// Loss for LinkLoss, nil for none. Each link takes its own copy.
	Loss LossModel
}

// Override gives the links it matches their own settings.
type Override struct {
	Plane int // -1 for every plane
	Match LinkMatch
	Link  LinkConfig
}

// LinkMatch selects links of a plane by kind and endpoint. A field of -1
// matches any.
type LinkMatch struct {
	Kind  LinkKind
	Host  int // for Uplink and Downlink
	Leaf  int // for FabricUp and FabricDown: the leaf, or the fat tree's edge switch; for CoreUp and CoreDown, the aggregation switch
	Spine int // for FabricUp and FabricDown: the spine, or the fat tree's aggregation switch; for CoreUp and CoreDown, the core switch
}

// LinkKind is the role of a link in a plane.
type LinkKind uint8

const (
	Uplink LinkKind = iota
	Downlink
	FabricUp
	FabricDown
	CoreUp
	CoreDown
	AnyKind LinkKind = 255
)

func (k LinkKind) String() string {
	switch k {
	case Uplink:
		return "up"
	case Downlink:
		return "down"
	case FabricUp:
		return "leaf-spine"
	case FabricDown:
		return "spine-leaf"
	case CoreUp:
		return "agg-core"
	case CoreDown:
		return "core-agg"
	}
	return "any"
}

// DefaultOverhead is what a link adds to each datagram's size unless
// LinkConfig.Overhead says otherwise. It covers the IPv4 and UDP headers,
// the Ethernet header and FCS, the preamble and the inter-frame gap.
const DefaultOverhead = 20 + 8 + 14 + 4 + 8 + 12

const (
	defaultMaxDatagram = 9000
	defaultREDWeight   = 0.002
	maxHosts           = 1 << 16
	maxPlanes          = 8
)

func (c *Config) validate() error {
	var errs []error
	if c.Hosts < 1 || c.Hosts > maxHosts {
		errs = append(errs, fmt.Errorf("hosts = %d: want 1 .. %d", c.Hosts, maxHosts))
	}
	if c.Planes < 1 || c.Planes > maxPlanes {
		errs = append(errs, fmt.Errorf("planes = %d: want 1 .. %d", c.Planes, maxPlanes))
	}
	if c.HostsPerLeaf < 0 {
		errs = append(errs, fmt.Errorf("hosts per leaf = %d: want >= 0", c.HostsPerLeaf))
	}
	if c.SinglePort && c.HostsPerLeaf == 0 {
		errs = append(errs, errors.New("single-port hosts need a leaf-spine (hosts per leaf > 0)"))
	}
	if c.HostsPerLeaf > 0 && (c.Spines < 1 || c.Spines > 1024) {
		errs = append(errs, fmt.Errorf("spines = %d: a leaf-spine plane needs 1 .. 1024", c.Spines))
	}
	if k := c.FatTreeK; k != 0 {
		switch {
		case k < 2 || k > 64 || k%2 != 0:
			errs = append(errs, fmt.Errorf("fat tree k = %d: want an even 2 .. 64", k))
		case c.Hosts > k*k*k/4:
			errs = append(errs, fmt.Errorf("hosts = %d: a fat tree of k = %d holds at most %d", c.Hosts, k, k*k*k/4))
		}
		if c.HostsPerLeaf != 0 || c.SinglePort {
			errs = append(errs, errors.New("a fat tree takes the place of a leaf-spine: hosts per leaf 0, no single port"))
		}
	}
	if b := c.SharedBuffer; b != nil && (b.Bytes < 1 || !(b.Alpha > 0 && b.Alpha <= 1024)) {
		errs = append(errs, fmt.Errorf("shared buffer of %d bytes, alpha %g: want at least 1 byte and alpha above 0, at most 1024", b.Bytes, b.Alpha))
	}
	if c.MaxDatagram < 0 || c.MaxDatagram > 65535 {
		errs = append(errs, fmt.Errorf("max datagram = %d: want 0 (default) .. 65535", c.MaxDatagram))
	}
	kinds := []struct {
		name string
		lc   *LinkConfig
		used bool
	}{{"uplink", &c.Uplink, true}, {"downlink", &c.Downlink, true},
		{"fabric up", &c.FabricUp, c.HostsPerLeaf > 0 || c.FatTreeK > 0}, {"fabric down", &c.FabricDown, c.HostsPerLeaf > 0 || c.FatTreeK > 0},
		{"core up", &c.CoreUp, c.FatTreeK > 0 && c.CoreUp.Rate != 0}, {"core down", &c.CoreDown, c.FatTreeK > 0 && c.CoreDown.Rate != 0}}
	for _, k := range kinds {
		if k.used {
			if err := k.lc.validate(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", k.name, err))
			}
		}
	}
	for i, o := range c.Overrides {
		if o.Plane < -1 || o.Plane >= c.Planes {
			errs = append(errs, fmt.Errorf("override %d: plane %d: the fabric has planes 0 .. %d", i, o.Plane, c.Planes-1))
		}
		if err := o.Link.validate(); err != nil {
			errs = append(errs, fmt.Errorf("override %d: %w", i, err))
		}
	}
	for i, f := range c.Faults {
		if err := f.validate(c); err != nil {
			errs = append(errs, fmt.Errorf("fault %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("netem: bad configuration: %w", errors.Join(errs...))
	}
	return nil
}

func (l *LinkConfig) validate() error {
	var errs []error
	if l.Rate <= 0 {
		errs = append(errs, fmt.Errorf("rate = %d b/s: want > 0", l.Rate))
	}
	if l.Delay < 0 {
		errs = append(errs, fmt.Errorf("delay = %v: want >= 0", l.Delay))
	}
	if l.MTU < 0 || l.MTU > 65535 {
		errs = append(errs, fmt.Errorf("MTU = %d: want 0 (none) .. 65535", l.MTU))
	}
	q := l.Queue
	if q.Limit < 0 || q.ECNThreshold < 0 {
		errs = append(errs, fmt.Errorf("queue limit %d, ECN threshold %d: want >= 0", q.Limit, q.ECNThreshold))
	}
	if r := q.ECNRamp; r != nil && (r.Min < 0 || r.Max <= r.Min) {
		errs = append(errs, fmt.Errorf("ECN ramp %d, %d: want 0 <= min < max", r.Min, r.Max))
	}
	if r := q.RED; r != nil {
		if r.MinThreshold < 0 || r.MaxThreshold <= r.MinThreshold {
			errs = append(errs, fmt.Errorf("RED thresholds %d, %d: want 0 <= min < max", r.MinThreshold, r.MaxThreshold))
		}
		if err := checkProb("RED max probability", r.MaxProb); err != nil {
			errs = append(errs, err)
		}
		if r.Weight < 0 || r.Weight > 1 {
			errs = append(errs, fmt.Errorf("RED weight %v: want (0, 1], or 0 for the default", r.Weight))
		}
	}
	if p := q.PFC; p != nil && (p.XOn < 0 || p.XOff <= p.XOn) {
		errs = append(errs, fmt.Errorf("PFC XOff %d, XOn %d: want 0 <= XOn < XOff", p.XOff, p.XOn))
	}
	im := l.Impair
	if im.Loss != nil {
		if err := im.Loss.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"reorder", im.Reorder}, {"duplicate", im.Duplicate}, {"corrupt", im.Corrupt}} {
		if err := checkProb(p.name, p.v); err != nil {
			errs = append(errs, err)
		}
	}
	if im.Jitter < 0 || im.ReorderGap < 0 {
		errs = append(errs, fmt.Errorf("jitter %v, reorder gap %v: want >= 0", im.Jitter, im.ReorderGap))
	}
	if im.Distribution > Pareto {
		errs = append(errs, fmt.Errorf("unknown jitter distribution %d", im.Distribution))
	}
	return errors.Join(errs...)
}

func (f *Fault) validate(c *Config) error {
	if f.At < 0 {
		return fmt.Errorf("time %v: want >= 0", f.At)
	}
	if f.Plane < 0 || f.Plane >= c.Planes {
		return fmt.Errorf("plane %d: the fabric has planes 0 .. %d", f.Plane, c.Planes-1)
	}
	switch f.Kind {
	case PlaneDown, PlaneBlackhole, Repair:
	case LinkSlowdown:
		if !(f.Factor > 0 && f.Factor <= 1) {
			return fmt.Errorf("slowdown factor %v: want (0, 1]", f.Factor)
		}
	case LinkMTU:
		if f.MTU < 0 || f.MTU > 65535 {
			return fmt.Errorf("MTU %d: want 0 (none) .. 65535", f.MTU)
		}
	case LinkLoss:
		if f.Loss != nil {
			if err := f.Loss.validate(); err != nil {
				return fmt.Errorf("loss: %w", err)
			}
		}
	default:
		return fmt.Errorf("unknown fault kind %d", f.Kind)
	}
	if m := f.Link; m != nil {
		if m.Host >= c.Hosts || m.Host < -1 {
			return fmt.Errorf("link match host %d: the fabric has hosts 0 .. %d", m.Host, c.Hosts-1)
		}
	}
	return nil
}
