package filexfer

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// An output appears under its target's name only when committed; an
// aborted one leaves nothing; an existing target is replaced only when
// asked; a directory takes the transfer's own name, made safe.
func TestOutput(t *testing.T) {
	dir := t.TempDir()
	o, err := CreateOutput(dir, "../evil/name.bin", false)
	if err != nil {
		t.Fatal(err)
	}
	o.Write([]byte("data"))
	want := filepath.Join(dir, SafeName("../evil/name.bin"))
	if o.Target() != want {
		t.Fatalf("target %s, want %s", o.Target(), want)
	}
	if _, err := os.Stat(want); err == nil {
		t.Fatal("the target exists before the commit")
	}
	if err := o.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(want); err != nil || string(b) != "data" {
		t.Fatalf("committed: %q, %v", b, err)
	}
	if _, err := CreateOutput(want, "x", false); !errors.Is(err, ErrExists) {
		t.Fatalf("an existing target without overwrite: %v", err)
	}
	o, err = CreateOutput(want, "x", true)
	if err != nil {
		t.Fatal(err)
	}
	o.Write([]byte("partial"))
	o.Abort()
	if b, _ := os.ReadFile(want); string(b) != "data" {
		t.Fatalf("an aborted output changed the target to %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("%d files left in the directory, want the one target", len(entries))
	}
}
