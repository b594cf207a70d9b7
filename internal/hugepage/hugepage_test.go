//go:build linux

package hugepage

import (
	"bufio"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// After Reserve, what the program allocates, more than the heap held
// before, lies in a mapping marked for huge pages (the "hg" of its VmFlags
// in /proc/self/smaps).
func TestReserveMarksWhereTheHeapGrows(t *testing.T) {
	marked, err := Reserve(64 << 20)
	if err != nil {
		t.Skipf("no transparent huge pages here: %v", err)
	}
	if marked < 64<<20 {
		t.Fatalf("marked %d bytes, less than the %d reserved", marked, 64<<20)
	}
	buf := make([]byte, 48<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	flags := vmFlags(t, uintptr(unsafe.Pointer(&buf[0])))
	runtime.KeepAlive(buf)
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Fatalf("the mapping of an allocation after Reserve has flags %q, without hg", flags)
	}
}

// vmFlags returns the VmFlags of the mapping holding address at.
func vmFlags(t *testing.T, at uintptr) string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if start, end, ok := bounds(line); ok {
			in = start <= at && at < end
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:"))
		}
	}
	t.Fatalf("no smaps entry holds %#x", at)
	return ""
}
