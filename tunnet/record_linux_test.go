package tunnet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"testing"
)

// deadPID is the PID of a process that has ended.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// Remove deletes the namespaces a dead network's record lists and that are
// still the ones it made, and then the record. It leaves a namespace of a
// recorded name that is not the one recorded, and one named as a host that the record
// does not list, unless forced. It refuses a network whose process runs.
// List tells network a's hosts from network a-b's.
func TestRemoveOnlyWhatTheRecordLists(t *testing.T) {
	_, err := exec.LookPath("ip")
	if os.Geteuid() != 0 || err != nil {
		if os.Getenv("MROCE_REQUIRE_NETADMIN") != "" {
			t.Fatal("needs root and ip")
		}
		t.Skip("needs root and ip")
	}
	name := fmt.Sprintf("r%d", rand.IntN(1e6))
	made := []string{namespace(name, 0), namespace(name, 1), namespace(name, 2), namespace(name+"-b", 0)}
	t.Cleanup(func() {
		for _, ns := range made {
			exec.Command("ip", "netns", "del", ns).Run()
		}
		removeRecord(name)
	})
	rec := Record{Name: name, PID: os.Getpid(), Hosts: 3, Planes: 1}
	for h, ns := range made[:3] {
		if err := ip("netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		if h < 2 { // host 2 is named as one, but not recorded
			ino, err := namespaceInode(ns)
			if err != nil {
				t.Fatal(err)
			}
			if h == 1 { // not the namespace of that name now, as if made again by someone else
				ino++
			}
			rec.Namespaces = append(rec.Namespaces, RecordedNamespace{Name: ns, Inode: ino})
		}
	}
	if err := ip("netns", "add", made[3]); err != nil {
		t.Fatal(err)
	}
	if err := createRecord(rec); err != nil {
		t.Fatal(err)
	}
	if got, _ := List(name); !slices.Equal(got, made[:3]) {
		t.Errorf("List(%q) = %v", name, got)
	}
	if got, _ := Unrecorded(); !slices.Contains(got, made[1]) || !slices.Contains(got, made[2]) || slices.Contains(got, made[0]) {
		t.Errorf("Unrecorded() = %v", got)
	}
	var running *RunningError
	if _, err := Remove(name, true); !errors.As(err, &running) || running.PID != os.Getpid() {
		t.Fatalf("Remove of a running network: %v", err)
	}
	rec.PID, rec.PIDStart = deadPID(t), 0
	if err := writeRecord(rec); err != nil {
		t.Fatal(err)
	}
	res, err := Remove(name, false)
	if err != nil || !slices.Equal(res.Removed, made[:1]) || !slices.Equal(res.Left, made[1:3]) || !res.Record {
		t.Fatalf("Remove: %+v, %v", res, err)
	}
	if _, ok, _ := ReadRecord(name); ok {
		t.Error("the record is left")
	}
	res, err = Remove(name, true)
	if err != nil || !slices.Equal(res.Removed, made[1:3]) || res.Record {
		t.Fatalf("Remove, forced: %+v, %v", res, err)
	}
	if _, err := os.Stat("/run/netns/" + made[3]); err != nil {
		t.Errorf("network %s-b's host is gone: %v", name, err)
	}
}
