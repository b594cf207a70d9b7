package tunnet

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Running says whether the process that made the network still runs. A
// process it cannot rule out counts as running, so that nothing in use is
// removed.
func (r Record) Running() bool {
	if r.PID <= 0 {
		return false
	}
	if err := unix.Kill(r.PID, 0); errors.Is(err, unix.ESRCH) {
		return false
	}
	start, state, err := procStat(r.PID)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false
	case err != nil:
		return true
	case state == 'Z' || state == 'X': // exited, not yet reaped
		return false
	}
	return r.PIDStart == 0 || start == r.PIDStart
}

// Present are the recorded namespaces that exist and are the ones Up made.
func (r Record) Present() []string {
	var out []string
	for _, rn := range r.Namespaces {
		if ours(rn) {
			out = append(out, rn.Name)
		}
	}
	return out
}

// ours says whether rn's namespace exists and is the one recorded. One
// recorded without an inode was claimed and never made, or made by an Up
// that died before it wrote the inode down: either way nothing shows it
// is Up's, so it is not.
func ours(rn RecordedNamespace) bool {
	ino, err := namespaceInode(rn.Name)
	return err == nil && rn.Inode != 0 && rn.Inode == ino
}

// procStat reads a process's start time, in clock ticks after boot, and
// its state from /proc/PID/stat.
func procStat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name, in parentheses, may hold anything: the fields
	// start after its last ')'. They start with field 3, the state, and
	// the start time is field 22.
	i := strings.LastIndexByte(string(b), ')')
	fields := strings.Fields(string(b[i+1:]))
	if i < 0 || len(fields) < 20 || len(fields[0]) != 1 {
		return 0, 0, fmt.Errorf("tunnet: /proc/%d/stat: unexpected %q", pid, b)
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	return start, fields[0][0], err
}

// namespaceInode identifies the namespace named ns now.
func namespaceInode(ns string) (uint64, error) {
	st, err := os.Stat("/run/netns/" + ns)
	if err != nil {
		return 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("tunnet: no inode for namespace %s", ns)
	}
	return sys.Ino, nil
}

// Unrecorded are the namespaces named mroce-* that no record accounts
// for: made by hand, by another program, by a version of this package that
// kept no records, or made again under a recorded name. Remove leaves
// them, unless forced to remove those named as one network's hosts.
func Unrecorded() ([]string, error) {
	all, err := List("")
	if err != nil {
		return nil, err
	}
	recs, rerr := Records()
	claimed := map[string]bool{}
	for _, r := range recs {
		for _, ns := range r.Present() {
			claimed[ns] = true
		}
	}
	var out []string
	for _, ns := range all {
		if !claimed[ns] {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out, rerr
}

// Remove deletes what network name's Up made and left: the recorded
// namespaces that are still the ones it made, with their interfaces, and
// then the record. It refuses a network whose Up process still runs
// (RunningError). Other namespaces named as the network's hosts it leaves
// and lists, unless force is set: then it deletes every namespace named
// mroce-NAME-hN.
func Remove(name string, force bool) (Removal, error) {
	var res Removal
	rec, ok, err := ReadRecord(name)
	if err != nil {
		return res, err
	}
	if ok && rec.Running() {
		return res, &RunningError{Name: name, PID: rec.PID}
	}
	existing, err := List(name)
	if err != nil {
		return res, err
	}
	var doomed []string
	mine := map[string]bool{}
	if ok {
		for _, ns := range rec.Present() {
			doomed, mine[ns] = append(doomed, ns), true
		}
	}
	for _, ns := range existing {
		switch {
		case mine[ns]:
		case force:
			doomed = append(doomed, ns)
		default:
			res.Left = append(res.Left, ns)
		}
	}
	var errs []error
	for _, ns := range doomed {
		if err := ip("netns", "del", ns); err != nil {
			errs = append(errs, err)
		} else {
			res.Removed = append(res.Removed, ns)
		}
	}
	if ok && len(errs) == 0 {
		if err := removeRecord(name); err != nil {
			errs = append(errs, err)
		} else {
			res.Record = true
		}
	}
	return res, errors.Join(errs...)
}

// Stop asks the process running network name to tear it down, with
// SIGTERM, waits up to timeout for it to end, and then removes what it
// left as Remove does. mroce netem up tears down on SIGTERM; another
// program may just die, leaving what Remove then deletes.
func Stop(name string, timeout time.Duration) (Removal, error) {
	rec, ok, err := ReadRecord(name)
	if err != nil {
		return Removal{}, err
	}
	if ok && rec.Running() {
		if rec.PID == os.Getpid() {
			return Removal{}, fmt.Errorf("tunnet: network %q is this process's own: Close it", name)
		}
		if err := unix.Kill(rec.PID, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
			return Removal{}, fmt.Errorf("tunnet: stopping process %d of network %q: %w", rec.PID, name, err)
		}
		for deadline := time.Now().Add(timeout); rec.Running(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				return Removal{}, fmt.Errorf("tunnet: network %q: process %d still runs %v after SIGTERM", name, rec.PID, timeout)
			}
		}
	}
	return Remove(name, false)
}
