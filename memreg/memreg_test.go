package memreg

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// seeded is a deterministic key source for tests.
type seeded struct{ r *rand.ChaCha8 }

func (s seeded) Read(p []byte) (int, error) { return s.r.Read(p) }

func newSeeded() *Registry { return NewRegistry(seeded{rand.NewChaCha8([32]byte{1})}) }

func TestLookupChecksKeyDomainAccess(t *testing.T) {
	reg := newSeeded()
	pd, other := reg.NewDomain(), reg.NewDomain()
	buf := make([]byte, 4096)
	w, err := pd.Register(buf, LocalWrite|RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	ro, _ := pd.Register(make([]byte, 100), RemoteRead)
	if w.Key() == 0 || w.Key() == ro.Key() {
		t.Fatalf("keys %#x, %#x", w.Key(), ro.Key())
	}
	cases := []struct {
		name string
		d    *Domain
		key  uint64
		want Access
		err  error
	}{
		{"right", pd, w.Key(), RemoteWrite, nil},
		{"unknown key", pd, w.Key() ^ 1, RemoteWrite, ErrBadKey},
		{"zero key", pd, 0, RemoteWrite, ErrBadKey},
		{"other domain", other, w.Key(), RemoteWrite, ErrWrongDomain},
		{"read-only region written", pd, ro.Key(), RemoteWrite, ErrAccess},
		{"write-only region read", pd, w.Key(), RemoteRead, ErrAccess},
		{"read", pd, ro.Key(), RemoteRead, nil},
	}
	for _, c := range cases {
		g, err := c.d.Lookup(c.key, c.want)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
		if err == nil {
			g.Release()
		}
	}
}

func TestRegisterRefusals(t *testing.T) {
	pd := newSeeded().NewDomain()
	if _, err := pd.Register(nil, LocalWrite); err != ErrEmpty {
		t.Errorf("empty buffer: %v", err)
	}
	if _, err := pd.Register(make([]byte, 8), RemoteWrite); err != ErrNeedsLocal {
		t.Errorf("remote write without local write: %v", err)
	}
}

func TestBoundsWithoutOverflow(t *testing.T) {
	pd := newSeeded().NewDomain()
	buf := make([]byte, 100)
	g, _ := pd.Register(buf, LocalWrite|RemoteWrite)
	for _, c := range []struct {
		off, n uint64
		ok     bool
	}{
		{0, 100, true}, {99, 1, true}, {100, 0, true}, {0, 0, true},
		{0, 101, false}, {100, 1, false}, {101, 0, false},
		{math.MaxUint64, 2, false}, {2, math.MaxUint64, false}, {math.MaxUint64 - 5, 10, false},
	} {
		if err := g.CheckRange(c.off, c.n); (err == nil) != c.ok {
			t.Errorf("CheckRange(%d, %d) = %v", c.off, c.n, err)
		}
	}
	if err := g.Place(98, []byte{1, 2, 3}); err != ErrBounds {
		t.Fatalf("placement across the end: %v", err)
	}
	if !bytes.Equal(buf, make([]byte, 100)) {
		t.Fatal("a refused placement wrote memory")
	}
	if err := g.Place(97, []byte{1, 2, 3}); err != nil || buf[99] != 3 {
		t.Fatalf("placement at the end: %v", err)
	}
}

// A key is invalid as soon as Deregister starts, even for a packet already
// in flight, and never valid again.
func TestDeregisterRevokes(t *testing.T) {
	pd := newSeeded().NewDomain()
	g, _ := pd.Register(make([]byte, 10), LocalWrite|RemoteWrite)
	key := g.Key()
	if err := g.Deregister(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.Lookup(key, RemoteWrite); err != ErrBadKey {
		t.Fatalf("lookup after deregister: %v", err)
	}
	if err := g.Deregister(); err != ErrRegistered {
		t.Fatalf("second deregister: %v", err)
	}
	for i := 0; i < 1000; i++ {
		n, _ := pd.Register(make([]byte, 1), LocalWrite)
		if n.Key() == key {
			t.Fatal("a revoked key was issued again")
		}
	}
}

// Deregister waits for a placement that had already found the region.
func TestDeregisterWaitsForPlacement(t *testing.T) {
	pd := newSeeded().NewDomain()
	g, _ := pd.Register(make([]byte, 10), LocalWrite|RemoteWrite)
	held, err := pd.Lookup(g.Key(), RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { g.Deregister(); close(done) }()
	select {
	case <-done:
		t.Fatal("Deregister returned while a placement was in progress")
	case <-time.After(20 * time.Millisecond):
	}
	held.Release()
	<-done
}

// Registration, lookup and deregistration from many goroutines at once.
func TestConcurrentRegistration(t *testing.T) {
	reg := NewRegistry(nil)
	pd := reg.NewDomain()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				g, err := pd.Register(make([]byte, 64), LocalWrite|RemoteWrite)
				if err != nil {
					t.Error(err)
					return
				}
				h, err := pd.Lookup(g.Key(), RemoteWrite)
				if err != nil {
					t.Error(err)
					return
				}
				h.Place(0, []byte{1})
				h.Release()
				if err := g.Deregister(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := len(*reg.keys.Load()); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

func TestLookupAllocatesNothing(t *testing.T) {
	pd := newSeeded().NewDomain()
	g, _ := pd.Register(make([]byte, 4096), LocalWrite|RemoteWrite)
	data := make([]byte, 1024)
	if n := testing.AllocsPerRun(1000, func() {
		h, err := pd.Lookup(g.Key(), RemoteWrite)
		if err != nil {
			panic(err)
		}
		h.Place(100, data)
		h.Release()
	}); n != 0 {
		t.Fatalf("lookup and place: %.1f allocations", n)
	}
}

func TestScopedRegionReachedOnlyThroughItsScope(t *testing.T) {
	reg := newSeeded()
	pd := reg.NewDomain()
	first, second := pd.NewScope(), pd.NewScope()
	own, err := first.Register(make([]byte, 64), LocalWrite|RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	shared, _ := pd.Register(make([]byte, 64), LocalWrite|RemoteWrite)
	if own.Scope() != first || own.Domain() != pd || shared.Scope() != nil {
		t.Fatalf("scope %p domain %p, shared scope %p", own.Scope(), own.Domain(), shared.Scope())
	}
	cases := []struct {
		name   string
		lookup func(uint64, Access) (*Region, error)
		key    uint64
		err    error
	}{
		{"own region through its scope", first.Lookup, own.Key(), nil},
		{"own region through another connection's scope", second.Lookup, own.Key(), ErrWrongScope},
		{"own region through the domain", pd.Lookup, own.Key(), ErrWrongScope},
		{"own region from another domain's scope", reg.NewDomain().NewScope().Lookup, own.Key(), ErrWrongDomain},
		{"the domain's region through a scope", second.Lookup, shared.Key(), nil},
		{"the domain's region through the domain", pd.Lookup, shared.Key(), nil},
	}
	for _, c := range cases {
		g, err := c.lookup(c.key, RemoteWrite)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
		if err == nil {
			g.Release()
		}
	}
	if err := own.Deregister(); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Lookup(own.Key(), RemoteWrite); !errors.Is(err, ErrBadKey) {
		t.Errorf("deregistered scoped region: %v", err)
	}
}
