package host

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mroce/mroce/engine"
)

// A link's speed is read from sysfs in Mb/s; none, -1 or garbage is no
// speed.
func TestLinkSpeed(t *testing.T) {
	sysfs := t.TempDir()
	for name, text := range map[string]string{"eth0": "25000\n", "veth1": "10000", "tun0": "-1\n", "bad0": "fast\n"} {
		os.MkdirAll(filepath.Join(sysfs, name), 0o755)
		os.WriteFile(filepath.Join(sysfs, name, "speed"), []byte(text), 0o644)
	}
	for name, want := range map[string]float64{"eth0": 25e9, "veth1": 10e9, "tun0": 0, "bad0": 0, "lo": 0} {
		if got, ok := linkSpeed(sysfs, name); got != want || ok != (want > 0) {
			t.Errorf("%s: %v %v, want %v", name, got, ok, want)
		}
	}
}

// The capacity is the links' speed as full WRITEs' payload, less the
// headroom: below the speed by the headers and the headroom, above it by
// no more than that. A plane on loopback, which reports no speed, gives
// no hints and says why.
func TestInboundFromLinks(t *testing.T) {
	sysfs := t.TempDir()
	os.MkdirAll(filepath.Join(sysfs, "lo"), 0o755)
	os.WriteFile(filepath.Join(sysfs, "lo", "speed"), []byte("10000\n"), 0o644) // as if lo were a 10 Gb/s link
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.61"), netip.MustParseAddr("127.0.0.62")}
	got, why := inboundFromLinks(lo, 9000, sysfs)
	// Two planes of 10 Gb/s, 1.25 GB/s each.
	if want := engine.Headroom * 2 * 1.25e9; got > want || got < 0.97*want {
		t.Errorf("capacity %v (%s), want just under %v", got, why, want)
	}
	if small, _ := inboundFromLinks(lo, 1500, sysfs); small >= got {
		t.Errorf("1500-byte packets give %v, no less than 9000-byte ones' %v", small, got)
	}
	if c, why := inboundFromLinks(lo, 9000, t.TempDir()); c != 0 || !strings.Contains(why, "reports no link speed") {
		t.Errorf("no speed: %v, %q", c, why)
	}
	if c, why := inboundFromLinks([]netip.Addr{netip.MustParseAddr("192.0.2.1")}, 0, sysfs); c != 0 || !strings.Contains(why, "no local interface") {
		t.Errorf("an address no interface holds: %v, %q", c, why)
	}
}
