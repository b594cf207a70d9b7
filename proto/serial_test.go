package proto

import "testing"

func TestSeqLess(t *testing.T) {
	for _, c := range []struct {
		a, b uint32
		less bool
	}{
		{0, 1, true},
		{1, 0, false},
		{5, 5, false},
		{0xFFFFFFFF, 0, true}, // wrap
		{0, 0xFFFFFFFF, false},
		{0xFFFFFF00, 0x00000100, true},
		{0, 1<<31 - 1, true},
		{0, 1 << 31, false}, // exactly half apart, so unordered
		{1 << 31, 0, false}, // and not the other way either
		{0x7FFFFFFF, 0x80000000, true},
	} {
		if got := SeqLess(c.a, c.b); got != c.less {
			t.Errorf("SeqLess(%#x, %#x) = %v, want %v", c.a, c.b, got, c.less)
		}
		if c.less && !SeqLessEq(c.a, c.b) {
			t.Errorf("SeqLessEq(%#x, %#x) false for a less pair", c.a, c.b)
		}
	}
	if !SeqLessEq(7, 7) || SeqLessEq(8, 7) {
		t.Error("SeqLessEq on equal / greater")
	}
	if d := SeqDiff(0xFFFFFFFE, 3); d != 5 {
		t.Errorf("SeqDiff across the wrap = %d, want 5", d)
	}
	if d := SeqDiff(3, 0xFFFFFFFE); d != -5 {
		t.Errorf("SeqDiff backwards across the wrap = %d, want -5", d)
	}
	if m := SeqMax(0xFFFFFFF0, 2); m != 2 {
		t.Errorf("SeqMax across the wrap = %#x, want 2", m)
	}
}

func TestCompareEpoch(t *testing.T) {
	want := map[[2]uint8]EpochRelation{
		{0, 0}: EpochCurrent, {1, 0}: EpochNext, {2, 0}: EpochAmbiguous, {3, 0}: EpochPrevious,
		{0, 3}: EpochNext, {3, 3}: EpochCurrent, {2, 3}: EpochPrevious, {1, 3}: EpochAmbiguous,
	}
	for in, rel := range want {
		if got := CompareEpoch(in[0], in[1]); got != rel {
			t.Errorf("CompareEpoch(%d, %d) = %v, want %v", in[0], in[1], got, rel)
		}
	}
}

func TestBacklogEncoding(t *testing.T) {
	for _, c := range []struct {
		bytes uint64
		field uint32
	}{
		{0, 0}, {1, 1}, {64, 1}, {65, 2}, {1 << 20, 1 << 14},
		{0xFFFFFFFF * 64, 0xFFFFFFFF}, {1 << 62, 0xFFFFFFFF},
	} {
		if got := EncodeBacklog(c.bytes); got != c.field {
			t.Errorf("EncodeBacklog(%d) = %d, want %d", c.bytes, got, c.field)
		}
	}
	if DecodeBacklog(16) != 1024 {
		t.Error("DecodeBacklog(16) != 1024")
	}
}

func TestNackFatality(t *testing.T) {
	retryable := map[NackCode]bool{NackRNR: true, NackSeqErr: true, NackResource: true}
	for c := 0; c < 256; c++ {
		code := NackCode(c)
		if code.Fatal() == retryable[code] {
			t.Errorf("%v: Fatal() = %v", code, code.Fatal())
		}
	}
}

func TestSetAsideAndDSCP(t *testing.T) {
	for c := 0; c < 256; c++ {
		ty := Type(c)
		if SetAside(ty) != "" && ty.Known() {
			t.Errorf("%v is defined and set aside", ty)
		}
	}
	if SetAside(0x04) == "" || SetAside(0x08) != "" || SetAside(0x0A) != "" {
		t.Error("set-aside codes differ from spec section 3")
	}
	for ty, want := range map[Type]uint8{TypeWrite: 26, TypeReadResp: 26, TypeAck: 26, TypeNack: 26, TypeCNP: 48, TypeConnect: 0, TypeProbe: 0} {
		if got := DefaultDSCP(ty); got != want {
			t.Errorf("DefaultDSCP(%v) = %d, want %d", ty, got, want)
		}
	}
}
