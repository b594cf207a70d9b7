package sim

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mroce/mroce/engine"
)

// A traffic file describes a fabric and the flows to run on it, a line
// each. The command mroce sim flows FILE runs one.
//
//	# a comment; blank lines are skipped
//	hosts 16               planes 4            hosts-per-leaf 8    spines 8
//	rate-gbps 100          delay 1us           ecn-kib 200         buffer-kib 16384
//	mtu 4096               paths 8             loss 0.01           seed 7
//	fat-tree-k 0           ecn-max-kib 0       shared-buffer-kib 0 shared-buffer-alpha 1
//	start-jitter 0         plane 2 rate-gbps 50
//	delay-target 25us      # or off, for senders without the delay signal
//	first-window fixed     # 16 packets, or bdp, the default (engine.Config.FirstWindow)
//	baseline
//	0->1 start 0 size 1MiB
//	3->7 start 10us size 64KiB after 0
//
// A setting line holds a name and its value, or "baseline" alone. A flow
// line is SRC->DST, then "start T" with T a Go duration, and "size S"
// with S in bytes or with KiB, MiB or GiB. An optional "after I,J" lists
// the numbers of earlier flow lines, counted from 0, that must be done
// first, as Flow's After does. Settings not given keep the values of
// DefaultFabric(4).

// Traffic is a parsed traffic file.
type Traffic struct {
	Fabric FabricOptions
	Flows  []Flow
}

// maxTrafficFlows bounds a file's flows, so that a typo cannot ask for a
// million connections.
const maxTrafficFlows = 1 << 20

// ParseTraffic reads a traffic file. Errors name the line.
func ParseTraffic(r io.Reader) (Traffic, error) {
	t := Traffic{Fabric: DefaultFabric(4)}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 1<<16)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		var err error
		if strings.Contains(f[0], "->") {
			err = t.parseFlow(f)
		} else {
			err = t.parseSetting(f)
		}
		if err != nil {
			return t, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return t, fmt.Errorf("line %d: %w", n+1, err)
	}
	if len(t.Flows) == 0 {
		return t, fmt.Errorf("no flows")
	}
	if err := t.Fabric.Links.Validate(); err != nil {
		return t, err // the buffer and the MTU are given on lines of their own
	}
	if err := t.Fabric.CheckPlanes(); err != nil {
		return t, err
	}
	for i, f := range t.Flows {
		if f.Src >= t.Fabric.Hosts || f.Dst >= t.Fabric.Hosts {
			return t, fmt.Errorf("flow %d: %d->%d, but there are %d hosts", i, f.Src, f.Dst, t.Fabric.Hosts)
		}
	}
	return t, nil
}

func (t *Traffic) parseSetting(f []string) error {
	o := &t.Fabric
	if f[0] == "baseline" && len(f) == 1 {
		o.Baseline = true
		return nil
	}
	if f[0] == "plane" {
		return o.parsePlane(f)
	}
	if len(f) != 2 {
		return fmt.Errorf("%q: want a setting and its value", strings.Join(f, " "))
	}
	name, v := f[0], f[1]
	intIn := func(dst *int, lo, hi int) error {
		x, err := strconv.Atoi(v)
		if err != nil || x < lo || x > hi {
			return fmt.Errorf("%s %q: want %d to %d", name, v, lo, hi)
		}
		*dst = x
		return nil
	}
	// kibIn reads KiB, lo to 1 GiB of them, into bytes.
	kibIn := func(dst *int, lo int) error {
		var k int
		err := intIn(&k, lo, 1<<20)
		*dst = k << 10
		return err
	}
	switch name {
	case "hosts":
		return intIn(&o.Hosts, 2, 256)
	case "planes":
		return intIn(&o.Planes, 1, 8)
	case "hosts-per-leaf":
		return intIn(&o.HostsPerLeaf, 0, 256)
	case "spines":
		return intIn(&o.Spines, 1, 64)
	case "fat-tree-k":
		return intIn(&o.FatTreeK, 0, 64)
	case "paths":
		return intIn(&o.Paths, 1, 256)
	case "ecn-max-kib":
		return kibIn(&o.ECNMax, 0)
	case "ecn-kib":
		return kibIn(&o.ECNThreshold, 0)
	case "buffer-kib":
		return kibIn(&o.Buffer, 1)
	case "shared-buffer-kib":
		return kibIn(&o.SharedBuffer, 0)
	case "shared-buffer-alpha":
		a, err := strconv.ParseFloat(v, 64)
		if err != nil || !(a > 0 && a <= 1024) {
			return fmt.Errorf("%s %q: want above 0, at most 1024", name, v)
		}
		o.SharedAlpha = a
		return nil
	case "mtu":
		return intIn(&o.MTU, MinMTU, MaxMTU)
	case "rate-gbps":
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x >= 1 && x <= 1600) {
			return fmt.Errorf("rate-gbps %q: want 1 to 1600", v)
		}
		o.LinkRate = int64(x * 1e9)
	case "delay":
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxDelay {
			return fmt.Errorf("delay %q: want a duration of 0 to %v", v, MaxDelay)
		}
		o.Delay = d
	case "delay-target":
		if v == "off" {
			o.DelayTarget = -1
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > MaxDelay {
			return fmt.Errorf("delay-target %q: want off or a duration above 0, at most %v", v, MaxDelay)
		}
		o.DelayTarget = d
	case "first-window":
		w, err := engine.ParseFirstWindowPolicy(v)
		if err != nil {
			return fmt.Errorf("first-window %q: want bdp or fixed", v)
		}
		o.FirstWindow = w
	case "start-jitter":
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxStartJitter {
			return fmt.Errorf("start-jitter %q: want a duration of 0 to %v", v, MaxStartJitter)
		}
		o.StartJitter = d
	case "loss":
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x >= 0 && x <= 0.5) {
			return fmt.Errorf("loss %q: want 0 to 0.5", v)
		}
		o.Loss = x
	case "seed":
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("seed %q: want a number", v)
		}
		o.Seed = x
	default:
		return fmt.Errorf("unknown setting %q", name)
	}
	return nil
}

func (t *Traffic) parseFlow(f []string) error {
	if len(t.Flows) >= maxTrafficFlows {
		return fmt.Errorf("more than %d flows", maxTrafficFlows)
	}
	src, dst, ok := strings.Cut(f[0], "->")
	a, err1 := strconv.Atoi(src)
	b, err2 := strconv.Atoi(dst)
	if !ok || err1 != nil || err2 != nil || a < 0 || b < 0 || a == b || a > 255 || b > 255 {
		return fmt.Errorf("%q: want SRC->DST, two different hosts", f[0])
	}
	fl := Flow{Src: a, Dst: b, Bytes: -1}
	rest := f[1:]
	for len(rest) > 0 {
		if len(rest) < 2 {
			return fmt.Errorf("%q: %q has no value", strings.Join(f, " "), rest[0])
		}
		k, v := rest[0], rest[1]
		rest = rest[2:]
		switch k {
		case "start":
			d, err := time.ParseDuration(v)
			if v == "0" {
				d, err = 0, nil
			}
			if err != nil || d < 0 || d > time.Minute {
				return fmt.Errorf("start %q: want a duration of 0 to 1m", v)
			}
			fl.Start = d
		case "size":
			s, err := parseSize(v)
			if err != nil {
				return err
			}
			fl.Bytes = s
		case "after":
			for _, x := range strings.Split(v, ",") {
				i, err := strconv.Atoi(x)
				if err != nil || i < 0 || i >= len(t.Flows) {
					return fmt.Errorf("after %q: want the numbers of earlier flows (0 to %d)", v, len(t.Flows)-1)
				}
				fl.After = append(fl.After, i)
			}
		default:
			return fmt.Errorf("%q: unknown %q (want start, size, after)", strings.Join(f, " "), k)
		}
	}
	if fl.Bytes < 0 {
		return fmt.Errorf("%q: no size", strings.Join(f, " "))
	}
	t.Flows = append(t.Flows, fl)
	return nil
}

// parseSize reads bytes with an optional unit of B, KiB, MiB or GiB. It
// takes 1 byte to 1 GiB, since a WRITE's length is 32 bits and every host
// holds a region of the largest flow.
func parseSize(v string) (int, error) {
	mult := 1
	num := v
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(v, u.suffix) {
			num, mult = strings.TrimSuffix(v, u.suffix), u.mult
			break
		}
	}
	x, err := strconv.ParseUint(num, 10, 32)
	if err != nil || x == 0 || x*uint64(mult) > 1<<30 {
		return 0, fmt.Errorf("size %q: want 1 byte to 1 GiB (B, KiB, MiB, GiB)", v)
	}
	return int(x) * mult, nil
}

// parsePlane reads "plane P rate-gbps R", "plane P delay D" or "plane P
// buffer-kib B".
func (o *FabricOptions) parsePlane(f []string) error {
	if len(f) != 4 {
		return fmt.Errorf("%q: want plane P rate-gbps R, plane P delay D, or plane P buffer-kib B", strings.Join(f, " "))
	}
	return o.ParsePlane(f[1], f[2], f[3])
}

// ParsePlane gives plane p's links the rate (key "rate-gbps", in Gb/s),
// the delay (key "delay", a Go duration) or the queue buffer (key
// "buffer-kib", in KiB) v.
func (o *FabricOptions) ParsePlane(p, key, v string) error {
	plane, err := strconv.Atoi(p)
	if err != nil || plane < 0 || plane > 7 {
		return fmt.Errorf("plane %q: want 0 to 7", p)
	}
	pl := PlaneLink{Plane: plane}
	switch key {
	case "rate-gbps":
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x >= 1 && x <= 1600) {
			return fmt.Errorf("plane %d rate-gbps %q: want 1 to 1600", plane, v)
		}
		pl.Rate = int64(x * 1e9)
	case "delay":
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > MaxDelay {
			return fmt.Errorf("plane %d delay %q: want a duration above 0, at most %v", plane, v, MaxDelay)
		}
		pl.Delay = d
	case "buffer-kib":
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 || k > 1<<20 {
			return fmt.Errorf("plane %d buffer-kib %q: want 1 to 1048576", plane, v)
		}
		pl.Buffer = k << 10
	default:
		return fmt.Errorf("plane %d %q: want rate-gbps, delay or buffer-kib", plane, key)
	}
	o.PlaneLinks = append(o.PlaneLinks, pl)
	return nil
}
