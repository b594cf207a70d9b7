//go:build linux

package hugepage

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// After Reserve, what the program allocates beyond what the heap held
// before lies in a mapping marked for huge pages, which the "hg" of its
// VmFlags in /proc/self/smaps shows.
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
// by asking for more than the memory available, and where
// GODEBUG=disablethp=1 asks huge pages away.
func TestAllowedRefusesWhatCouldFail(t *testing.T) {
	if err := allowed(math.MaxInt); err == nil && math.MaxInt>>40 > 0 { // 8 EiB, though 2 GiB may fit on a 32-bit machine
		t.Fatal("a growth of 8 EiB allowed")
	}
	t.Setenv("GODEBUG", "disablethp=1")
	if err := allowed(1 << 20); err == nil {
		t.Fatal("allowed with GODEBUG=disablethp=1")
	}
}

// Reserve works once a process. A second call returns the first's result
// and makes nothing resident, since a second growth would reuse and so
// clear the first's pages.
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

// mapped returns size bytes of fresh anonymous memory, on a 2 MiB
// boundary, marked for huge pages or against them, and what unmaps it.
func mapped(b *testing.B, size int, huge bool) ([]byte, func()) {
	mem, err := unix.Mmap(-1, 0, size+2<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		b.Skipf("mmap: %v", err)
	}
	off := (2<<20 - int(uintptr(unsafe.Pointer(&mem[0]))%(2<<20))) % (2 << 20)
	buf := mem[off : off+size]
	advice := unix.MADV_NOHUGEPAGE
	if huge {
		advice = unix.MADV_HUGEPAGE
	}
	if err := unix.Madvise(buf, advice); err != nil {
		b.Skipf("madvise: %v", err)
	}
	return buf, func() { unix.Munmap(mem) }
}

// BenchmarkFirstTouch is what a process pays the kernel for memory it
// touches for the first time, on small pages and on huge ones. Its MB/s
// are bytes made resident a second. On a virtual machine whose hypervisor
// takes back the memory a guest frees, a huge page the guest has not used
// lately can cost far more than the small pages it replaces, and one a
// process just freed far less. Each iteration after the first maps what
// the one before freed, so only the first tells. Run it with -benchtime 1x
// once after the machine sat idle for a while, and once right after.
func BenchmarkFirstTouch(b *testing.B) {
	const size = 64 << 20
	for _, huge := range []bool{false, true} {
		b.Run(map[bool]string{false: "small", true: "huge"}[huge], func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				buf, unmap := mapped(b, size, huge)
				for i := 0; i < size; i += 4096 {
					buf[i] = 1
				}
				unmap()
			}
		})
	}
}

// BenchmarkDependentLoadsOnHugePages times loads whose address the one
// before gives, in a random walk of whole lines over memory on huge pages.
// Huge pages take the TLB out of it, so what is left is the caches. Where
// the time stays high from a size on, that size is past what the caches
// give this process.
func BenchmarkDependentLoadsOnHugePages(b *testing.B) {
	for _, size := range []int{1 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20, 128 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			buf, unmap := mapped(b, size, true)
			defer unmap()
			lines := size / 64
			next := func(i int) *int { return (*int)(unsafe.Pointer(&buf[i*64])) }
			order := rand.New(rand.NewPCG(1, 2)).Perm(lines)
			for i, l := range order {
				*next(l) = order[(i+1)%lines]
			}
			at := 0
			b.ResetTimer()
			for range b.N {
				at = *next(at)
			}
			loadSink = at
		})
	}
}

var loadSink int
