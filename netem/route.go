package netem

import (
	"net/netip"
)

// Addr is host h's address on plane p, 10.p.(h/256).(h%256).
func Addr(plane, host int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(plane), byte(host >> 8), byte(host)})
}

// locate maps an address to its plane and host on this fabric. Single-port
// hosts have only their plane-0 address.
func (f *Fabric) locate(a netip.Addr) (plane, host int, ok bool) {
	if !a.Is4() {
		return 0, 0, false
	}
	b := a.As4()
	plane, host = int(b[1]), int(b[2])<<8|int(b[3])
	ok = b[0] == 10 && plane < len(f.planes) && host < len(f.hosts) && (plane == 0 || !f.cfg.SinglePort)
	return plane, host, ok
}

// Spine returns the spine that ECMP picks for a datagram from src to dst.
// It is -1 when the datagram turns at its leaf or the addresses do not route.
func (f *Fabric) Spine(src, dst netip.AddrPort) int {
	_, s := f.Path(src, dst)
	return s
}

// Path returns the plane and spine a datagram from src to dst takes. The
// spine is -1 when the datagram turns at its leaf, and both are -1 when the
// addresses do not route. The plane is the source address's. With
// single-port hosts it is the one the source leaf's hash picks. In a fat
// tree the spine is the aggregation switch of its pod that the source edge
// switch's hash picks.
func (f *Fabric) Path(src, dst netip.AddrPort) (plane, spine int) {
	p, sh, ok1 := f.locate(src.Addr())
	q, dh, ok2 := f.locate(dst.Addr())
	if !ok1 || !ok2 || p != q {
		return -1, -1
	}
	if f.cfg.HostsPerLeaf == 0 && f.cfg.FatTreeK == 0 || f.leafOf(sh) == f.leafOf(dh) {
		return p, -1
	}
	if f.cfg.FatTreeK > 0 {
		return p, f.pick(f.hash(p, uint64(f.leafOf(sh)), src, dst), f.cfg.FatTreeK/2)
	}
	return f.ecmp(p, f.leafOf(sh), src, dst)
}

// hash hashes a datagram's UDP 5-tuple keyed by the plane's key and a
// switch's id, as a switch with a hash seed of its own would.
func (f *Fabric) hash(p int, sw uint64, src, dst netip.AddrPort) uint64 {
	s, d := src.Addr().As4(), dst.Addr().As4()
	x := uint64(s[0])<<24 | uint64(s[1])<<16 | uint64(s[2])<<8 | uint64(s[3])
	y := uint64(d[0])<<24 | uint64(d[1])<<16 | uint64(d[2])<<8 | uint64(d[3])
	h := mix64(f.planes[p].ecmpKey ^ sw)
	h = mix64(h ^ x<<32 ^ y)
	return mix64(h ^ uint64(src.Port())<<32 ^ uint64(dst.Port())<<16 ^ 17)
}

// pick is one of n choices by hash h.
func (f *Fabric) pick(h uint64, n int) int { return int((h >> 32) * uint64(n) >> 32) }

// ecmp picks the plane and spine of a datagram leaving leaf. With
// single-port hosts the leaf hashes over the spines of every plane, so the
// hash picks the plane too.
func (f *Fabric) ecmp(p, leaf int, src, dst netip.AddrPort) (plane, spine int) {
	h := f.hash(p, uint64(leaf), src, dst)
	choices := uint64(f.cfg.Spines)
	if f.cfg.SinglePort {
		choices *= uint64(len(f.planes))
	}
	i := int((h >> 32) * choices >> 32)
	if f.cfg.SinglePort {
		return i / f.cfg.Spines, i % f.cfg.Spines
	}
	return p, i
}

// mix64 is SplitMix64's 64-bit finalizer. Every input bit affects every
// output bit.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	return z ^ z>>31
}

// Route returns the links a datagram from src to dst crosses, in order, or
// nil where the addresses do not route. It is the route Send gives such a
// datagram, without sending one.
func (f *Fabric) Route(src, dst netip.AddrPort) []*Link {
	p, sh, ok1 := f.locate(src.Addr())
	q, dh, ok2 := f.locate(dst.Addr())
	if !ok1 || !ok2 || p != q {
		return nil
	}
	var r [6]uint32
	n := f.fillRoute(&r, p, sh, dh, src, dst)
	links := make([]*Link, n)
	for i := range links {
		links[i] = f.links[r[i]]
	}
	return links
}

// route fills pkt.route for a datagram from host sh to host dh on plane p.
func (f *Fabric) route(pkt *packet, p, sh, dh int) {
	pkt.hops = f.fillRoute(&pkt.route, p, sh, dh, pkt.d.Src, pkt.d.Dst)
}

// fillRoute fills r with the links' ids of the route from host sh to host
// dh on plane p and returns how many there are.
func (f *Fabric) fillRoute(r *[6]uint32, p, sh, dh int, src, dst netip.AddrPort) uint8 {
	r[0] = uint32(f.Uplink(p, sh).id)
	sl, dl := f.leafOf(sh), f.leafOf(dh)
	if f.cfg.HostsPerLeaf == 0 && f.cfg.FatTreeK == 0 || sl == dl {
		r[1] = uint32(f.Downlink(p, dh).id)
		return 2
	}
	if f.cfg.FatTreeK > 0 {
		return f.fillFatTree(r, p, sl, dl, dh, src, dst)
	}
	p, s := f.ecmp(p, sl, src, dst)
	pl := &f.planes[p]
	r[1] = uint32(pl.leafUp[sl][s].id)
	r[2] = uint32(pl.spineDown[s][dl].id)
	r[3] = uint32(f.Downlink(p, dh).id)
	return 4
}

// fillFatTree fills the route of a datagram between edge switches se and
// de of plane p's fat tree, to host dh. The source edge switch's hash picks
// an aggregation switch of its pod. Within the pod the datagram turns
// there. Otherwise that switch's hash picks one of its cores, and the core
// sends it down to the aggregation switch of the same index in the
// destination pod.
func (f *Fabric) fillFatTree(r *[6]uint32, p, se, de, dh int, src, dst netip.AddrPort) uint8 {
	half := f.cfg.FatTreeK / 2
	pl := &f.planes[p]
	j := f.pick(f.hash(p, uint64(se), src, dst), half)
	sp, dp := se/half, de/half
	agg := sp*half + j
	r[1] = uint32(pl.edgeUp[se][j].id)
	if sp == dp {
		r[2] = uint32(pl.aggDown[agg][de%half].id)
		r[3] = uint32(f.Downlink(p, dh).id)
		return 4
	}
	i := f.pick(f.hash(p, 1<<32|uint64(agg), src, dst), half)
	core := j*half + i
	r[2] = uint32(pl.aggUp[agg][i].id)
	r[3] = uint32(pl.coreDown[core][dp].id)
	r[4] = uint32(pl.aggDown[dp*half+j][de%half].id)
	r[5] = uint32(f.Downlink(p, dh).id)
	return 6
}
