package hugepage

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

func reserve(n int) (int, error) {
	room := make([]byte, n) // fresh from the system: never touched, so never resident
	at := uintptr(unsafe.Pointer(unsafe.SliceData(room)))
	room = nil
	runtime.GC() // its pages back among the heap's free ones
	lo, hi, err := mappingOf(at)
	if err != nil {
		return 0, err
	}
	// By address: the mapping is the runtime's, not a Go object to slice.
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, unix.MADV_HUGEPAGE); errno != 0 {
		return 0, fmt.Errorf("hugepage: madvise: %w", errno)
	}
	return int(hi - lo), nil
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

// bounds reads the address range that starts a line of /proc/self/maps
// (or a mapping's first line in smaps): "start-end perms ...", in hex.
func bounds(line string) (start, end uintptr, ok bool) {
	r, _, _ := strings.Cut(line, " ")
	a, b, found := strings.Cut(r, "-")
	s, err1 := strconv.ParseUint(a, 16, 64)
	e, err2 := strconv.ParseUint(b, 16, 64)
	return uintptr(s), uintptr(e), found && err1 == nil && err2 == nil
}
