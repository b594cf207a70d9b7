package hugepage

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

var first struct {
	sync.Once
	marked int
	err    error
}

func reserve(n int) (int, error) {
	first.Do(func() { first.marked, first.err = reserveOnce(n) })
	return first.marked, first.err
}

func reserveOnce(n int) (int, error) {
	if err := allowed(n); err != nil {
		return 0, err
	}
	room := make([]byte, n) // fresh from the system and never touched, so never resident
	at := uintptr(unsafe.Pointer(unsafe.SliceData(room)))
	room = nil
	runtime.GC() // its pages back among the heap's free ones
	lo, hi, err := mappingOf(at)
	if err != nil {
		return 0, err
	}
	// By address, since the mapping is the runtime's and not a Go object to slice.
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, unix.MADV_HUGEPAGE); errno != 0 {
		return 0, fmt.Errorf("hugepage: madvise: %w", errno)
	}
	return int(hi - lo), nil
}

// allowed says why growing the heap by n bytes for huge pages is not
// done here, or nil.
func allowed(n int) error {
	if strings.Contains(os.Getenv("GODEBUG"), "disablethp=1") {
		return errors.New("hugepage: GODEBUG=disablethp=1")
	}
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		return errors.New("hugepage: no transparent huge pages")
	}
	var as unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_AS, &as) == nil && as.Cur != unix.RLIM_INFINITY {
		return errors.New("hugepage: the address space is limited")
	}
	if policy, err := os.ReadFile("/proc/sys/vm/overcommit_memory"); err == nil && strings.TrimSpace(string(policy)) == "2" {
		return errors.New("hugepage: strict overcommit")
	}
	if avail, ok := memAvailable(); !ok || avail < 2*uint64(n) {
		return errors.New("hugepage: too little memory available")
	}
	return nil
}

// memAvailable is MemAvailable of /proc/meminfo, in bytes.
func memAvailable() (uint64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kib, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kib << 10, err == nil
		}
	}
	return 0, false
}

// mappingOf returns the bounds of the mapping that holds address at.
func mappingOf(at uintptr) (lo, hi uintptr, err error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, 0, fmt.Errorf("hugepage: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if start, end, ok := bounds(sc.Text()); ok && start <= at && at < end {
			return start, end, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("hugepage: /proc/self/maps: %w", err)
	}
	return 0, 0, fmt.Errorf("hugepage: no mapping holds %#x", at)
}

// bounds reads the address range in hex that starts a line of
// /proc/self/maps or a mapping's first line in smaps, as in
// "start-end perms ...".
func bounds(line string) (start, end uintptr, ok bool) {
	r, _, _ := strings.Cut(line, " ")
	a, b, found := strings.Cut(r, "-")
	s, err1 := strconv.ParseUint(a, 16, 64)
	e, err2 := strconv.ParseUint(b, 16, 64)
	return uintptr(s), uintptr(e), found && err1 == nil && err2 == nil
}
