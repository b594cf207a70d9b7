package engine

import (
	"errors"
	"fmt"
	"math"

	"github.com/mroce/mroce/memreg"
)

// sgl is a scatter-gather list, the local buffers of one work request. The
// message's bytes run through them in order.
type sgl []SGE

// gatherList returns the work request's list, which is SGL if given and
// Local otherwise. It returns no list when Local is empty too, for a
// zero-length message or a receive that takes only a WRITE_IMM's notice.
func gatherList(local SGE, list []SGE, one *[1]SGE) sgl {
	if len(list) > 0 {
		return list
	}
	if local == (SGE{}) {
		return nil
	}
	one[0] = local
	return one[:]
}

// check verifies that every entry is a range of a region of domain pd that
// grants want, and returns the total length.
func (l sgl) check(pd *memreg.Domain, want memreg.Access) (uint32, error) {
	var total uint64
	for i, e := range l {
		g := e.Region
		if g == nil || g.Domain() != pd {
			return 0, fmt.Errorf("engine: buffer %d is not registered in the connection's protection domain", i)
		}
		if g.Access()&want != want {
			return 0, fmt.Errorf("engine: buffer %d: its region does not grant %v", i, want)
		}
		if err := g.CheckRange(e.Offset, uint64(e.Length)); err != nil {
			return 0, fmt.Errorf("engine: buffer %d: %w", i, err)
		}
		total += uint64(e.Length)
	}
	if total > math.MaxUint32 {
		return 0, errors.New("engine: a message is at most 4 GiB - 1")
	}
	return uint32(total), nil
}

// gather copies the message bytes [off, off+len(dst)) into dst.
func (l sgl) gather(off uint32, dst []byte) {
	for _, e := range l {
		if len(dst) == 0 {
			return
		}
		if off >= e.Length {
			off -= e.Length
			continue
		}
		n := min(uint32(len(dst)), e.Length-off)
		src, err := e.Region.Slice(e.Offset+uint64(off), uint64(n))
		if err != nil {
			panic("engine: a posted buffer left its region: " + err.Error()) // checked at post
		}
		copy(dst, src)
		dst, off = dst[n:], 0
	}
}

// scatter places src at message offset off across the list.
func (l sgl) scatter(off uint32, src []byte) error {
	for _, e := range l {
		if len(src) == 0 {
			return nil
		}
		if off >= e.Length {
			off -= e.Length
			continue
		}
		n := min(uint32(len(src)), e.Length-off)
		if err := e.Region.Place(e.Offset+uint64(off), src[:n]); err != nil {
			return err
		}
		src, off = src[n:], 0
	}
	if len(src) > 0 {
		return memreg.ErrBounds
	}
	return nil
}
