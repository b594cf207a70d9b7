//go:build linux

package hugepage

import (
	"bufio"
	"fmt"
	"math"
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
		t.Skipf("Reserve declined here: %v", err)
	}
	if marked < 64<<20 {
		t.Fatalf("marked %d bytes, less than the %d reserved", marked, 64<<20)
	}
	runtime.GC() // what an earlier run of the test left is free again
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

// Growing the heap is refused, not tried, where it could end the program
// or where huge pages were asked away: more than the memory available, or
// GODEBUG=disablethp=1.
func TestAllowedRefusesWhatCouldFail(t *testing.T) {
	if err := allowed(math.MaxInt); err == nil && math.MaxInt>>40 > 0 { // 8 EiB (on a 32-bit machine, 2 GiB may fit)
		t.Fatal("a growth of 8 EiB allowed")
	}
	t.Setenv("GODEBUG", "disablethp=1")
	if err := allowed(1 << 20); err == nil {
		t.Fatal("allowed with GODEBUG=disablethp=1")
	}
}

// Reserve works once a process: a second call returns the first's result
// and makes nothing resident (a second growth would reuse, and so clear,
// the first's pages).
func TestReserveOnce(t *testing.T) {
	m1, err1 := Reserve(64 << 20)
	before := residentKiB(t)
	m2, err2 := Reserve(64 << 20)
	if grown := residentKiB(t) - before; grown > 4<<10 {
		t.Fatalf("a second Reserve made %d KiB resident", grown)
	}
	if m1 != m2 || (err1 == nil) != (err2 == nil) {
		t.Fatalf("second Reserve: %d, %v; first: %d, %v", m2, err2, m1, err1)
	}
}

// residentKiB is VmRSS of /proc/self/status.
func residentKiB(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib int
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kib)
			return kib
		}
	}
	t.Skip("no VmRSS")
	return 0
}
