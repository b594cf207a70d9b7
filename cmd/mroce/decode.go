package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mroce/mroce/app/appmsg"
	"github.com/mroce/mroce/dissect"
	"github.com/mroce/mroce/internal/hexfmt"
	"github.com/mroce/mroce/internal/pcapio"
	"github.com/mroce/mroce/proto"
)

// decodeCommand defines mroce decode.
func decodeCommand() *cli.Command {
	return &cli.Command{
		Name:      "decode",
		Usage:     "decode packets given as hex or found in a capture, and print every field",
		ArgsUsage: "[HEX...]",
		Description: "Each HEX argument is one packet. Without arguments, packets are read as hex\n" +
			"from standard input, one per block of lines; blank lines separate blocks. Hex\n" +
			"text may have # comments to the end of a line, whitespace, 0x prefixes and :\n" +
			"separators (the format of testdata/golden/*.hex). With --pcap, the packets are\n" +
			"the UDP payloads to or from --port in a pcap or pcapng capture.\n\n" +
			"Every packet is checked as a receiver checks it (docs/spec.md section 9, steps\n" +
			"1-6). A malformed packet is reported on standard error with the check it failed,\n" +
			"and decoding goes on with the next; the exit status is then 1.\n\n" +
			"A protected packet (the authenticated mode, section 13) shows its clear common\n" +
			"header and how much is encrypted, unless --key-log names the key log its sender\n" +
			"or receiver wrote (--key-log of send, recv and bench): then it is opened and\n" +
			"printed whole. One that does not open under the log's keys is malformed.\n\n" +
			"With --apps, a capture of one connection is read as its application messages\n" +
			"instead: every SEND, WRITE, WRITE_IMM and READ each side posted, whole, one a\n" +
			"line, and its CLOSEs (the format of docs/apps.md, section 4).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "pcap", Usage: "read the packets from the pcap or pcapng `FILE`", TakesFile: true},
			&cli.UintFlag{Name: "port", Value: proto.DefaultPort, Usage: "with --pcap, the UDP `PORT` (source or destination) of mroce packets"},
			&cli.BoolFlag{Name: "no-crc", Usage: "do not check the CRC32C trailer (for hand-crafted packets)"},
			&cli.StringFlag{Name: "key-log", Usage: "open protected packets with the secrets in this key log (MROCE_SECRET lines, docs/spec.md section 13.7)", TakesFile: true},
			&cli.BoolFlag{Name: "apps", Usage: "with --pcap, print the application messages of the capture's connection (docs/apps.md), of every UDP port unless --port is given"},
		},
		Action: runDecode,
	}
}

// decoder prints packets and counts the malformed ones.
type decoder struct {
	out       *bufio.Writer
	errOut    io.Writer
	noCRC     bool
	keys      *keyLog // nil without --key-log
	packets   int
	malformed int
	printed   bool // whether a packet was printed yet
}

func runDecode(c *cli.Context) error {
	pcapFile := c.String("pcap")
	if pcapFile != "" && c.Args().Present() {
		return usagef(c, "give packets as hex arguments or with --pcap, not both")
	}
	if c.IsSet("port") && pcapFile == "" {
		return usagef(c, "--port applies only with --pcap")
	}
	port := c.Uint("port")
	if port == 0 || port > 65535 {
		return usagef(c, "--port %d is not a UDP port (1-65535)", port)
	}
	if c.Bool("apps") {
		if pcapFile == "" || c.IsSet("key-log") || c.IsSet("no-crc") {
			return usagef(c, "--apps takes --pcap FILE, and neither --key-log nor --no-crc")
		}
		if !c.IsSet("port") {
			port = 0 // an acceptor's ACKs and answers leave from its source ports, not from --port
		}
		return printApps(c.App.Writer, pcapFile, uint16(port))
	}
	d := &decoder{out: bufio.NewWriter(c.App.Writer), errOut: c.App.ErrWriter, noCRC: c.Bool("no-crc")}
	defer d.out.Flush()
	if path := c.String("key-log"); path != "" {
		text, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return usagef(c, "--key-log: %v", err)
		} else if err != nil {
			return err
		}
		if d.keys, err = parseKeyLog(string(text)); err != nil {
			return usagef(c, "--key-log %s: %v", path, err)
		}
	}

	switch {
	case pcapFile != "":
		f, err := os.Open(pcapFile)
		if errors.Is(err, fs.ErrNotExist) {
			return usagef(c, "%v", err)
		} else if err != nil {
			return err
		}
		defer f.Close()
		if err := d.decodePcap(f, uint16(port)); err != nil {
			return fmt.Errorf("%s: %w", pcapFile, err)
		}
	case c.Args().Present():
		for i, arg := range c.Args().Slice() {
			d.decodeArg(i+1, arg)
		}
	default:
		if err := d.decodeStdin(c.App.Reader); err != nil {
			return err
		}
		if d.packets == 0 {
			return usagef(c, "no packets: give hex arguments, --pcap FILE, or hex on standard input")
		}
	}
	if d.malformed > 0 {
		return fmt.Errorf("%d of %d packets malformed", d.malformed, d.packets)
	}
	return nil
}

// decodeStdin decodes the blank-line-separated hex blocks of r.
func (d *decoder) decodeStdin(r io.Reader) error {
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintln(d.errOut, "Reading hex packets from the terminal; end with Ctrl-D.")
		}
	}
	text, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("standard input: %w", err)
	}
	for _, b := range hexfmt.Blocks(string(text)) {
		label := fmt.Sprintf("packet %d", d.packets+1)
		where := fmt.Sprintf("standard input, line %d", b.Line)
		if b.Err != nil {
			d.packets++
			d.fail(label+" ("+where+")", b.Err.Error())
			continue
		}
		d.decodePacket(label, where, b.Data, nil)
	}
	return nil
}

// decodeArg decodes argument i, one packet written as hex.
func (d *decoder) decodeArg(i int, text string) {
	label := fmt.Sprintf("packet %d", i)
	b, err := hexfmt.Parse(text)
	if err != nil {
		d.packets++
		d.fail(fmt.Sprintf("%s (argument %d)", label, i), err.Error())
		return
	}
	if len(b) == 0 {
		d.packets++
		d.fail(fmt.Sprintf("%s (argument %d)", label, i), "no hex bytes")
		return
	}
	d.decodePacket(label, "", b, nil)
}

// decodePcap decodes the mroce packets of a capture and prints a summary.
func (d *decoder) decodePcap(r io.Reader, port uint16) error {
	pr, err := pcapio.NewReader(r, port)
	if err != nil {
		return err
	}
	for {
		dg, err := pr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			d.summary(pr.Stats(), port)
			return err
		}
		label := fmt.Sprintf("frame %d", dg.Frame)
		if dg.Truncated() {
			d.packets++
			d.fail(fmt.Sprintf("%s (%s)", label, addrs(&dg)), fmt.Sprintf(
				"the capture holds %d of the datagram's %d bytes (snap length): cannot check or decode it",
				len(dg.Payload), dg.Length))
			continue
		}
		d.decodePacket(label, "", dg.Payload, &dg)
	}
	d.summary(pr.Stats(), port)
	return nil
}

func (d *decoder) summary(s pcapio.Stats, port uint16) {
	fmt.Fprintf(d.out, "%d frames: %d UDP datagrams to or from port %d, %d other frames skipped\n",
		s.Frames, s.Datagrams, port, s.Skipped)
}

func addrs(dg *pcapio.Datagram) string {
	return fmt.Sprintf("%v -> %v", netip.AddrPortFrom(dg.Src, dg.SrcPort), netip.AddrPortFrom(dg.Dst, dg.DstPort))
}

// decodePacket checks one packet, then prints it or reports why it is
// malformed. where says which line of the input it came from, and dg the
// capture it was found in. Either may be empty.
func (d *decoder) decodePacket(label, where string, b []byte, dg *pcapio.Datagram) {
	d.packets++
	var p proto.Packet
	var err error
	opened := ""
	switch {
	case len(b) >= proto.MinPacketLen && proto.CommonHeader(b).Protected() && d.keys != nil:
		var out []byte
		var phase uint64
		if out, phase, err = d.keys.open(b); err == nil {
			err = p.DecodeOpened(out)
			opened = fmt.Sprintf("  Opened with the key log: phase %d of connection %08x's secret\n", phase, proto.CommonHeader(b).DstConnID())
		}
	case len(b) >= proto.MinPacketLen && proto.CommonHeader(b).Protected():
		d.printed = true
		fmt.Fprintf(d.out, "%s: %v, protected, %d bytes (no --key-log to open it)\n", label, proto.Type(b[1]), len(b))
		d.printWhere(where, dg)
		dissect.Sealed(d.out, b)
		fmt.Fprintln(d.out)
		return
	case d.noCRC:
		err = p.DecodeNoCRC(b)
	default:
		err = p.Decode(b)
	}
	if err != nil {
		ctx := label
		if where != "" {
			ctx += " (" + where + ")"
		} else if dg != nil {
			ctx += " (" + addrs(dg) + ")"
		}
		d.fail(ctx, dissect.ExplainError(b, err))
		return
	}
	if d.noCRC && !d.printed {
		fmt.Fprintf(d.out, "CRC32C trailers are not checked (--no-crc).\n\n")
	}
	d.printed = true
	fmt.Fprintf(d.out, "%s: %s\n", label, dissect.Summary(&p))
	d.printWhere(where, dg)
	fmt.Fprint(d.out, opened)
	dissect.Fields(d.out, &p, !d.noCRC)
	fmt.Fprintln(d.out)
}

// printWhere prints where a packet came from: a line of the input or a
// frame of a capture.
func (d *decoder) printWhere(where string, dg *pcapio.Datagram) {
	if where != "" {
		fmt.Fprintf(d.out, "  Input: %s\n", where)
	}
	if dg != nil {
		dscp := fmt.Sprint(dg.DSCP)
		if name := pcapio.DSCPName(dg.DSCP); name != "" {
			dscp += " (" + name + ")"
		}
		fmt.Fprintf(d.out, "  Capture: %s, %s, DSCP %s, ECN %v\n",
			dg.Time.UTC().Format("2006-01-02T15:04:05.000000000Z"), addrs(dg), dscp, dg.ECN)
	}
}

// fail reports a malformed packet on standard error, after what was printed
// before it.
func (d *decoder) fail(label, msg string) {
	d.malformed++
	d.out.Flush()
	fmt.Fprintf(d.errOut, "%s: %s: %s\n", progName, label, msg)
}

// printApps prints the application messages of the connection a capture
// holds (docs/apps.md, section 4).
func printApps(w io.Writer, path string, port uint16) error {
	packets, err := capturePayloads(path, port)
	if err != nil {
		return err
	}
	msgs, err := appmsg.Extract(packets)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, m := range msgs {
		line := m.String()
		if !m.Complete() {
			line += " (not all of it in the capture)"
		}
		fmt.Fprintln(w, line)
	}
	return nil
}

// capturePayloads reads the UDP payloads to or from port, every one when
// port is 0, of a capture, in its order.
func capturePayloads(path string, port uint16) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	payloads, err := pcapio.ReadPayloads(f, port)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return payloads, nil
}
