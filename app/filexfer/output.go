package filexfer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Output is where a receiver writes a transfer: a temporary file beside
// the target, renamed to it only once the transfer is verified. A failed
// transfer leaves nothing under the target's name, and no partial file.
type Output struct {
	*os.File
	target string
}

// ErrExists is what CreateOutput returns for a target that exists, when
// it may not overwrite it.
var ErrExists = errors.New("filexfer: the output file exists")

// CreateOutput opens the output for a transfer named name. path is a file,
// or an existing directory into which the transfer's own name goes, made
// safe (SafeName). An existing file is replaced only with overwrite.
func CreateOutput(path, name string, overwrite bool) (*Output, error) {
	target := path
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		target = filepath.Join(path, SafeName(name))
	}
	if _, err := os.Lstat(target); err == nil && !overwrite {
		return nil, fmt.Errorf("%w: %s", ErrExists, target)
	}
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".partial-*")
	if err != nil {
		return nil, err
	}
	return &Output{File: f, target: target}, nil
}

// Target is the name the output takes once committed.
func (o *Output) Target() string { return o.target }

// Commit closes the output and gives it the target's name.
func (o *Output) Commit() error {
	if err := o.File.Close(); err != nil {
		os.Remove(o.File.Name())
		return err
	}
	if err := os.Rename(o.File.Name(), o.target); err != nil {
		os.Remove(o.File.Name())
		return err
	}
	return nil
}

// KeepPartial closes the output of a failed transfer and names it as
// partial: the target's name with ".partial", or with ".partial-N" when
// that exists. It returns the name.
func (o *Output) KeepPartial() (string, error) {
	o.File.Close()
	for i := 0; i < 100; i++ {
		name := o.target + ".partial"
		if i > 0 {
			name = fmt.Sprintf("%s-%d", name, i)
		}
		if _, err := os.Lstat(name); err == nil {
			continue
		}
		if err := os.Rename(o.File.Name(), name); err != nil {
			os.Remove(o.File.Name())
			return "", err
		}
		return name, nil
	}
	os.Remove(o.File.Name())
	return "", fmt.Errorf("filexfer: %s.partial and 99 more exist", o.target)
}

// Abort closes the output and removes it.
func (o *Output) Abort() {
	o.File.Close()
	os.Remove(o.File.Name())
}
