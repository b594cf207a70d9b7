package tunnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// StateDir holds the record of every emulated network that Up made and
// that still exists, one file NAME.json a network. Records name what is
// this package's to remove, so that Remove never deletes a namespace it
// did not make. /run is emptied at boot, as /run/netns is.
const StateDir = "/run/mroce/netem"

// Record is what Up writes about a network it makes, before it makes any
// of it, and Close removes once everything is gone.
type Record struct {
	Name string `json:"name"`
	// PID is the process that called Up, and PIDStart its start time in
	// clock ticks after boot (field 22 of /proc/PID/stat), so that a
	// reused PID is not taken for it.
	PID      int       `json:"pid"`
	PIDStart uint64    `json:"pid_start,omitempty"`
	Started  time.Time `json:"started"`
	Hosts    int       `json:"hosts"`
	Planes   int       `json:"planes"`
	MTU      int       `json:"mtu"`
	// Namespaces are the hosts' namespaces, listed before Up makes them.
	Namespaces []RecordedNamespace `json:"namespaces"`
}

// RecordedNamespace is one namespace of a Record.
type RecordedNamespace struct {
	Name string `json:"name"`
	// Inode identifies the namespace Up made (the inode of
	// /run/netns/NAME), so that a namespace made again under the same name
	// by someone else is not taken for it. It is 0 until Up has made it.
	Inode uint64 `json:"inode,omitempty"`
	// Interfaces are the TUN interfaces inside. They go with the
	// namespace, and with the process that holds them open.
	Interfaces []string `json:"interfaces"`
}

// recordPath is the file of network name's record.
func recordPath(name string) string { return filepath.Join(StateDir, name+".json") }

// ReadRecord reads network name's record. ok is false when there is none.
func ReadRecord(name string) (r Record, ok bool, err error) {
	b, err := os.ReadFile(recordPath(name))
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, false, fmt.Errorf("tunnet: record %s: %w", recordPath(name), err)
	}
	if r.Name != name {
		return Record{}, false, fmt.Errorf("tunnet: record %s: it names network %q", recordPath(name), r.Name)
	}
	return r, true, nil
}

// Records reads every record, by name. It returns those it could read
// with the errors of those it could not.
func Records() ([]Record, error) {
	entries, err := os.ReadDir(StateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Record
	var errs []error
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		r, ok, err := ReadRecord(name)
		if err != nil {
			errs = append(errs, err)
		} else if ok {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

// createRecord writes r's file if there is none. The file is the lock
// that keeps two emulators from taking one name.
func createRecord(r Record) error {
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return fmt.Errorf("tunnet: the record of what it makes: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(recordPath(r.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		os.Remove(recordPath(r.Name))
		return fmt.Errorf("tunnet: the record of what it makes: %w", err)
	}
	return f.Close()
}

// writeRecord replaces r's file at once, through a temporary file.
func writeRecord(r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(StateDir, "."+r.Name+".*")
	if err != nil {
		return fmt.Errorf("tunnet: the record of what it makes: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), recordPath(r.Name))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("tunnet: the record of what it makes: %w", err)
	}
	return nil
}

// removeRecord deletes network name's record.
func removeRecord(name string) error {
	if err := os.Remove(recordPath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// RunningError is the answer of Remove for a network whose Up process
// still runs: its namespaces are in use.
type RunningError struct {
	Name string
	PID  int
}

func (e *RunningError) Error() string {
	return fmt.Sprintf("tunnet: network %q is running (process %d)", e.Name, e.PID)
}

// Removal is what Remove did.
type Removal struct {
	// Removed are the namespaces deleted.
	Removed []string
	// Left are namespaces named as the network's hosts that its record
	// does not account for, so that Remove left them: there is no record,
	// or the namespace of that name is not the one Up made.
	Left []string
	// Record says whether the record was removed.
	Record bool
}
