// Package memreg is registered memory. It holds protection domains, memory
// regions over caller-provided []byte with access rights, and the 64-bit
// random keys, or rkeys, by which a peer names a region. Every placement of
// remote data is checked here. A packet can write only inside a region that
// grants remote write, in the connection's protection domain, through a key
// that is still registered. A region registered through a Scope is reachable
// through that scope's connection alone, so a key one peer learns is of no
// use to another peer of the same domain (docs/spec.md section 5.1).
//
// Keys are looked up without locks, since the key table is copy-on-write, so
// placements on many connections never contend. Deregistration revokes the
// key at once, so that no lookup finds it afterwards and no packet already
// in flight can use it. It then waits for placements that had already
// looked it up.
package memreg

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Access is what a region allows.
type Access uint8

const (
	LocalWrite   Access = 1 << iota // the local side may write it, as receive buffers and READ targets
	RemoteWrite                     // peers may WRITE into it
	RemoteRead                      // peers may READ from it
	RemoteAtomic                    // peers may run atomics on it
)

func (a Access) String() string {
	s := ""
	for _, n := range []struct {
		bit  Access
		name string
	}{{LocalWrite, "local-write"}, {RemoteWrite, "remote-write"}, {RemoteRead, "remote-read"}, {RemoteAtomic, "remote-atomic"}} {
		if a&n.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += n.name
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// Errors of registration and of access checks. The engine maps the access
// errors to NACK codes.
var (
	ErrBadKey      = errors.New("memreg: unknown or revoked key")
	ErrWrongDomain = errors.New("memreg: key belongs to another protection domain")
	ErrWrongScope  = errors.New("memreg: key belongs to another connection")
	ErrAccess      = errors.New("memreg: access not granted by the region")
	ErrBounds      = errors.New("memreg: outside the region")
	ErrRegistered  = errors.New("memreg: region already deregistered")
	ErrEmpty       = errors.New("memreg: cannot register an empty buffer")
	ErrNeedsLocal  = errors.New("memreg: remote write or atomic access needs local write too")
)

// Registry is one device's key space, holding every region of every
// protection domain of the device.
type Registry struct {
	mu      sync.Mutex // serializes writers of keys
	keys    atomic.Pointer[map[uint64]*Region]
	random  io.Reader
	domains atomic.Uint32
}

// NewRegistry returns an empty registry drawing keys from random, or from
// crypto/rand.Reader when random is nil. Simulations pass a seeded source so
// runs repeat. Anything facing a real network keeps the default.
func NewRegistry(random io.Reader) *Registry {
	if random == nil {
		random = rand.Reader
	}
	r := &Registry{random: random}
	empty := map[uint64]*Region{}
	r.keys.Store(&empty)
	return r
}

// Domain is a protection domain. Connections and regions of one domain can
// reach only each other.
type Domain struct {
	reg *Registry
	id  uint32
}

// NewDomain returns a new protection domain.
func (r *Registry) NewDomain() *Domain {
	return &Domain{reg: r, id: r.domains.Add(1)}
}

// ID numbers the domain within its registry.
func (d *Domain) ID() uint32 { return d.id }

// Region is a registered buffer. Its memory belongs to the caller, who must
// not use it for anything else while remote access is possible.
type Region struct {
	buf     []byte
	key     uint64
	domain  *Domain
	scope   *Scope // nil for a region every connection of the domain reaches
	access  Access
	revoked atomic.Bool
	active  atomic.Int64 // placements in progress
}

// Register registers buf with the given access and returns the region with
// a fresh random key. Every connection of the domain reaches the region, as
// a verbs memory region is reached by every queue pair of its domain.
func (d *Domain) Register(buf []byte, access Access) (*Region, error) {
	return d.register(buf, access, nil)
}

// Scope is one connection's view of its domain. Through it the connection
// reaches the domain's regions and its own, and no other connection
// reaches its own. It plays the part of a verbs memory window bound to one
// queue pair.
type Scope struct {
	domain *Domain
}

// NewScope returns a new scope in the domain, for one connection.
func (d *Domain) NewScope() *Scope { return &Scope{domain: d} }

// Domain is the scope's protection domain.
func (s *Scope) Domain() *Domain { return s.domain }

// Register registers buf as Domain.Register does, for the scope's
// connection alone: a peer reaches it only on that connection.
func (s *Scope) Register(buf []byte, access Access) (*Region, error) {
	return s.domain.register(buf, access, s)
}

func (d *Domain) register(buf []byte, access Access, scope *Scope) (*Region, error) {
	if len(buf) == 0 {
		return nil, ErrEmpty
	}
	if access&(RemoteWrite|RemoteAtomic) != 0 && access&LocalWrite == 0 {
		return nil, ErrNeedsLocal // as in verbs, remote write implies local write
	}
	r := d.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.keys.Load()
	var key uint64
	for {
		var b [8]byte
		if _, err := io.ReadFull(r.random, b[:]); err != nil {
			return nil, fmt.Errorf("memreg: drawing a key: %w", err)
		}
		key = binary.LittleEndian.Uint64(b[:])
		if _, taken := old[key]; key != 0 && !taken {
			break
		}
	}
	reg := &Region{buf: buf, key: key, domain: d, scope: scope, access: access}
	next := make(map[uint64]*Region, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[key] = reg
	r.keys.Store(&next)
	return reg, nil
}

// Deregister revokes the region's key at once, then waits until placements
// that had already found the region have finished. Afterwards no packet can
// reach the memory, and the key is never valid again.
func (g *Region) Deregister() error {
	if g.revoked.Swap(true) {
		return ErrRegistered
	}
	r := g.domain.reg
	r.mu.Lock()
	old := *r.keys.Load()
	next := make(map[uint64]*Region, len(old))
	for k, v := range old {
		if k != g.key {
			next[k] = v
		}
	}
	r.keys.Store(&next)
	r.mu.Unlock()
	for g.active.Load() != 0 {
		// A placement is a bounded memory copy, so spin politely until it ends.
		yield()
	}
	return nil
}

// Key is the region's remote key.
func (g *Region) Key() uint64 { return g.key }

// Len is the region's length in bytes.
func (g *Region) Len() int { return len(g.buf) }

// Access is what the region allows.
func (g *Region) Access() Access { return g.access }

// Domain is the region's protection domain.
func (g *Region) Domain() *Domain { return g.domain }

// Scope is the connection's scope the region was registered through, or
// nil for a region of the whole domain.
func (g *Region) Scope() *Scope { return g.scope }

// Bytes is the registered memory, for the local side's own use.
func (g *Region) Bytes() []byte { return g.buf }

// Lookup finds the region for a key presented by a peer of domain d and
// checks that it grants want. It finds no region registered through a
// scope. On success the caller holds a placement reference. It must call
// Release when its access ends, and Deregister waits for it.
func (d *Domain) Lookup(key uint64, want Access) (*Region, error) {
	return d.lookup(key, want, nil)
}

// Lookup finds the region for a key presented by the scope's peer, as
// Domain.Lookup does. It finds the domain's regions and the scope's own.
func (s *Scope) Lookup(key uint64, want Access) (*Region, error) {
	return s.domain.lookup(key, want, s)
}

func (d *Domain) lookup(key uint64, want Access, scope *Scope) (*Region, error) {
	g, ok := (*d.reg.keys.Load())[key]
	if !ok {
		return nil, ErrBadKey
	}
	if g.domain != d {
		return nil, ErrWrongDomain
	}
	if g.scope != nil && g.scope != scope {
		return nil, ErrWrongScope
	}
	if g.access&want != want {
		return nil, ErrAccess
	}
	g.active.Add(1)
	if g.revoked.Load() { // deregistered between the lookup and now
		g.active.Add(-1)
		return nil, ErrBadKey
	}
	return g, nil
}

// Release ends an access begun by Lookup.
func (g *Region) Release() { g.active.Add(-1) }

// CheckRange reports whether [off, off+n) lies inside the region, without
// overflow.
func (g *Region) CheckRange(off, n uint64) error {
	if off > uint64(len(g.buf)) || n > uint64(len(g.buf))-off {
		return ErrBounds
	}
	return nil
}

// Place copies data into the region at off, after checking the bounds.
func (g *Region) Place(off uint64, data []byte) error {
	if err := g.CheckRange(off, uint64(len(data))); err != nil {
		return err
	}
	copy(g.buf[off:], data)
	return nil
}

// Slice returns the region's bytes [off, off+n), after checking the bounds.
// It is the source of a READ response or of a packet being sent or resent.
func (g *Region) Slice(off, n uint64) ([]byte, error) {
	if err := g.CheckRange(off, n); err != nil {
		return nil, err
	}
	return g.buf[off : off+n], nil
}

// AtomicSize is the size of an atomic operation's target (spec section
// 5.12).
const AtomicSize = 8

// atomics serializes every atomic operation of the process, so that two on
// the same bytes never interleave whatever regions or domains alias them
// (spec section 5.12: atomic among the responder's atomic operations).
var atomics sync.Mutex

// ErrAlign is an atomic operation's target at an offset that is not a
// multiple of AtomicSize.
var ErrAlign = errors.New("memreg: atomic target not at a multiple of 8 bytes")

// CheckAtomic reports whether an atomic operation may target the 8 bytes at
// off: within the region, at a multiple of 8 of its offsets.
func (g *Region) CheckAtomic(off uint64) error {
	if off%AtomicSize != 0 {
		return ErrAlign
	}
	return g.CheckRange(off, AtomicSize)
}

// FetchAdd adds add to the big-endian 64-bit integer at off, modulo 2^64,
// and returns the value it held before.
func (g *Region) FetchAdd(off, add uint64) (uint64, error) {
	return g.atomically(off, func(old uint64) uint64 { return old + add })
}

// CompareSwap writes swap to the big-endian 64-bit integer at off if it
// equals compare, and returns the value it held before either way.
func (g *Region) CompareSwap(off, compare, swap uint64) (uint64, error) {
	return g.atomically(off, func(old uint64) uint64 {
		if old == compare {
			return swap
		}
		return old
	})
}

// atomically replaces the big-endian 64-bit integer at off with what op
// makes of it, under the lock of every atomic, and returns it as it was.
func (g *Region) atomically(off uint64, op func(old uint64) uint64) (uint64, error) {
	if err := g.CheckAtomic(off); err != nil {
		return 0, err
	}
	atomics.Lock()
	defer atomics.Unlock()
	target := g.buf[off : off+AtomicSize]
	old := binary.BigEndian.Uint64(target)
	binary.BigEndian.PutUint64(target, op(old))
	return old, nil
}
