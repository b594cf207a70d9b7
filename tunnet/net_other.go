//go:build !linux

package tunnet

import (
	"errors"
	"os/exec"
	"time"

	"github.com/mroce/mroce/netem"
)

// Stats are the emulator's counters at the TUN devices.
type Stats struct {
	Read, Malformed, Written, WriteErrors uint64
}

// Net is a running emulated network. It exists on Linux only.
type Net struct{}

var errLinux = errors.New("tunnet: the kernel-path emulator needs Linux (network namespaces and TUN devices)")

func Up(Config) (*Net, error)                         { return nil, errLinux }
func (*Net) Close() error                             { return errLinux }
func (*Net) InHost(int, func() error) error           { return errLinux }
func (*Net) Command(int, string, ...string) *exec.Cmd { return nil }
func (*Net) Namespace(int) string                     { return "" }
func (*Net) Do(func(*netem.Fabric))                   {}
func (*Net) Stats() Stats                             { return Stats{} }
func List(string) ([]string, error)                   { return nil, nil }
func Unrecorded() ([]string, error)                   { return nil, nil }
func Remove(string, bool) (Removal, error)            { return Removal{}, errLinux }
func Stop(string, time.Duration) (Removal, error)     { return Removal{}, errLinux }
func (Record) Running() bool                          { return false }
func (Record) Present() []string                      { return nil }
