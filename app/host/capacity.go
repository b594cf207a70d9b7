package host

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/proto"
	"github.com/mroce/mroce/udp"
)

// sysClassNet is where Linux reports an interface's speed.
const sysClassNet = "/sys/class/net"

// linkOverhead is what a link carries per datagram beyond its UDP
// payload: the IPv4 and UDP headers, the Ethernet header and FCS, the
// preamble and the gap between frames. An IPv6 header adds 20.
const linkOverhead = 20 + 8 + 14 + 4 + 8 + 12

// InboundFromLinks is the capacity a host's rate hints share among its
// senders when none is given: the speeds of the planes' links, summed,
// as the payload of full WRITEs of maxPacket bytes (0: what the
// interfaces carry), less engine.Headroom; the engine holds back
// more while arrivals are CE-marked. It is 0, no hints, when a plane's
// speed is unknown, and why says so.
func InboundFromLinks(planes []netip.Addr, maxPacket int) (capacity float64, why string) {
	return inboundFromLinks(planes, maxPacket, sysClassNet)
}

func inboundFromLinks(planes []netip.Addr, maxPacket int, sysfs string) (float64, string) {
	var total float64
	for _, a := range planes {
		mtu, name, err := udp.InterfaceMTU(a)
		if err != nil {
			return 0, err.Error()
		}
		bps, ok := linkSpeed(sysfs, name)
		if !ok {
			return 0, fmt.Sprintf("%s (%v) reports no link speed", name, a)
		}
		size := maxPacket
		if size == 0 {
			size = min(mtu-ipUDPHeaders(a), 9000)
		}
		total += bps / 8 * payloadShare(size, a)
	}
	return engine.Headroom * total, "the planes' link speed"
}

// linkSpeed reads an interface's speed from sysfs, in bits a second.
// Loopback, and devices that know no speed, report none or -1.
func linkSpeed(sysfs, name string) (float64, bool) {
	b, err := os.ReadFile(filepath.Join(sysfs, name, "speed"))
	if err != nil {
		return 0, false
	}
	mbps, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || mbps <= 0 {
		return 0, false
	}
	return float64(mbps) * 1e6, true
}

// payloadShare is the part of a link's rate that the payload of full
// WRITEs of size bytes takes.
func payloadShare(size int, a netip.Addr) float64 {
	h, _ := proto.HeaderLen(proto.TypeWrite, 0)
	payload := size - h - proto.TrailerLen
	wire := size + linkOverhead
	if a.Is6() {
		wire += 20
	}
	if payload <= 0 {
		return 0
	}
	return float64(payload) / float64(wire)
}

func ipUDPHeaders(a netip.Addr) int {
	if a.Is6() {
		return 48
	}
	return 28
}
