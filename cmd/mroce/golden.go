package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/internal/hexfmt"
	"github.com/mroce/mroce/internal/pcapio"
)

// goldenPcapCommand rebuilds testdata/golden.pcap for make golden. It is
// hidden because it is a build step, not a user command.
func goldenPcapCommand() *cli.Command {
	return &cli.Command{
		Name:      "golden-pcap",
		Usage:     "write the packets of DIR/*.hex (one packet a file, in name order) to the pcap file OUT",
		ArgsUsage: "DIR OUT",
		Hidden:    true,
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usagef(c, "golden-pcap needs two arguments, DIR and OUT; got %d", c.NArg())
			}
			dir, out := c.Args().Get(0), c.Args().Get(1)
			if st, err := os.Stat(dir); err != nil {
				return usagef(c, "%v", err)
			} else if !st.IsDir() {
				return usagef(c, "%s is not a directory", dir)
			}
			n, err := writeGoldenPcap(dir, out)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "%s: %d packets\n", out, n)
			return nil
		},
	}
}

// writeGoldenPcap writes the packets of dir/*.hex to the pcap file out and
// returns how many it wrote.
func writeGoldenPcap(dir, out string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.hex")) // sorted by name
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("no .hex files in %s", dir)
	}
	packets := make([][]byte, 0, len(files))
	for _, name := range files {
		text, err := os.ReadFile(name)
		if err != nil {
			return 0, err
		}
		b, err := hexfmt.Parse(string(text))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if len(b) == 0 {
			return 0, fmt.Errorf("%s: no bytes", name)
		}
		packets = append(packets, b)
	}
	var buf bytes.Buffer
	if err := pcapio.WritePackets(&buf, packets); err != nil {
		return 0, err
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return 0, err
	}
	return len(packets), nil
}
