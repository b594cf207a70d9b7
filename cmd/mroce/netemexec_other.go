//go:build !linux

package main

import (
	"errors"
	"io"
)

// runInNamespace needs Linux's network namespaces.
func runInNamespace(string, []string, io.Reader, io.Writer, io.Writer) (int, error) {
	return 0, errors.New("netem exec needs Linux (network namespaces)")
}
