package sim

import (
	"fmt"
	"testing"
)

func TestTmpBurst(t *testing.T) {
	debugPaths = true
	cfg := TransferConfig{Bytes: 64 << 20, Planes: 4, Paths: 8, LinkRate: 100e9, Delay: 1000,
		Loss: 0.02, ECNThreshold: 200 << 10, Buffer: 16 << 20, Seed: 1, Burst: true, BurstLen: 4}
	r, err := Transfer(cfg)
	fmt.Println(r, err, r.Sender)
	debugPaths = false
}
