//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
)

// sitting is every run of one kbench and what it prints.
type sitting struct {
	cfg        config
	ccs        []string
	notes      []string
	loadBefore string
	loadAfter  string
	runs       []result
	shares     []share
	versus     []versus
}

// versus is mroce against TCP pinned to every plane, at one loss rate.
type versus struct {
	Loss      float64 `json:"loss"`
	CC        string  `json:"cc"`
	MroceGbps float64 `json:"mroce_gbps"`
	TCPGbps   float64 `json:"tcp_gbps"`
	Goodput   float64 `json:"goodput_ratio"`    // mroce over TCP
	CPU       float64 `json:"cpu_per_gb_ratio"` // mroce's CPU s/GB over TCP's, both ends
}

// run measures everything asked for, loss rate by loss rate, so that a
// change of the machine's load over the sitting falls on every kind alike.
func (s *sitting) run(ctx context.Context, b *bench, progress io.Writer) {
	say := func(r result) {
		if s.cfg.json {
			return
		}
		if r.Error != "" {
			fmt.Fprintf(progress, "kbench: %-28s loss %5.2f%%: %s\n", r.label(), r.Loss*100, r.Error)
			return
		}
		fmt.Fprintf(progress, "kbench: %-28s loss %5.2f%%: %7.3f Gb/s, %.2f CPU s/GB\n", r.label(), r.Loss*100, r.Gbps, r.PerGB.Total)
	}
	for _, loss := range s.cfg.losses {
		if s.cfg.runs["mroce"] {
			if ctx.Err() != nil {
				return
			}
			r := b.runMroce(ctx, loss)
			say(r)
			s.runs = append(s.runs, r)
		}
		if !s.cfg.runs["tcp"] {
			continue
		}
		for _, conns := range s.cfg.tcpConns {
			for _, cc := range s.ccs {
				if ctx.Err() != nil {
					return
				}
				r := b.runTCP(ctx, cc, conns, loss)
				say(r)
				s.runs = append(s.runs, r)
			}
		}
	}
	if s.cfg.runs["share"] {
		for _, cc := range s.ccs {
			if ctx.Err() != nil {
				return
			}
			sh := b.runShare(ctx, cc)
			if !s.cfg.json {
				if sh.Error != "" {
					fmt.Fprintf(progress, "kbench: sharing with TCP %s: %s\n", cc, sh.Error)
				} else {
					fmt.Fprintf(progress, "kbench: sharing with TCP %s: mroce %.3f Gb/s, TCP %.3f Gb/s\n", cc, sh.MroceGbps, sh.TCPGbps)
				}
			}
			s.shares = append(s.shares, sh)
		}
	}
}

// summarize fills in each run's ratios to its kind's loss-free run, and
// mroce against TCP pinned to every plane.
func (s *sitting) summarize() {
	same := func(a, b result) bool { return a.Kind == b.Kind && a.CC == b.CC && a.Conns == b.Conns }
	for i := range s.runs {
		r := &s.runs[i]
		if !r.ok() {
			continue
		}
		for _, z := range s.runs {
			if z.Loss == 0 && same(*r, z) && z.ok() {
				r.VsLossFree = r.Gbps / z.Gbps
				r.VsTarget = r.VsLossFree / (1 - r.Loss)
			}
		}
	}
	for _, m := range s.runs {
		if m.Kind != "mroce" || !m.ok() {
			continue
		}
		for _, t := range s.runs {
			if t.Kind == "tcp" && t.Conns == s.cfg.planes && t.Loss == m.Loss && t.ok() {
				s.versus = append(s.versus, versus{Loss: m.Loss, CC: t.CC, MroceGbps: m.Gbps, TCPGbps: t.Gbps,
					Goodput: m.Gbps / t.Gbps, CPU: m.PerGB.Total / t.PerGB.Total})
			}
		}
	}
}

// failed is whether any run failed.
func (s *sitting) failed() bool {
	for _, r := range s.runs {
		if r.Error != "" {
			return true
		}
	}
	for _, sh := range s.shares {
		if sh.Error != "" {
			return true
		}
	}
	return false
}

// testbedDoc is the sitting's settings and machine, as --json prints them.
type testbedDoc struct {
	Prefix        string   `json:"prefix"`
	Planes        int      `json:"planes"`
	RateMbit      int      `json:"rate_mbit"`
	QueueKiB      int      `json:"queue_kib"`
	BurstBytes    int      `json:"tbf_burst_bytes"`
	MTU           int      `json:"mtu"`
	Offloads      string   `json:"offloads"`
	CEFraction    float64  `json:"ce"`
	SizeMiB       int      `json:"size_mib"`
	MaxSeconds    float64  `json:"max_seconds"`
	MrocePaths    int      `json:"mroce_paths"`
	CCs           []string `json:"cc"`
	CPUs          int      `json:"cpus"`
	Kernel        string   `json:"kernel"`
	LoadBefore    string   `json:"load_before"`
	LoadAfter     string   `json:"load_after"`
	Notes         []string `json:"notes"`
	CapacityMbit  int      `json:"capacity_mbit"`
	LossDirection string   `json:"loss_direction"`
}

func (s *sitting) bedDoc() testbedDoc {
	c := s.cfg
	return testbedDoc{Prefix: c.prefix, Planes: c.planes, RateMbit: c.rateMbit, QueueKiB: c.queueKiB,
		BurstBytes: bedConfig{rateMbit: c.rateMbit, offloads: c.offloads}.burstBytes(), MTU: 1500, Offloads: c.offloads, CEFraction: c.ce,
		SizeMiB: c.sizeMiB, MaxSeconds: c.maxSeconds, MrocePaths: c.paths, CCs: s.ccs, CPUs: runtime.NumCPU(),
		Kernel: kernel(), LoadBefore: s.loadBefore, LoadAfter: s.loadAfter, Notes: s.notes,
		CapacityMbit: c.planes * c.rateMbit, LossDirection: "both"}
}

func (s *sitting) writeJSON(w io.Writer) error {
	doc := struct {
		Testbed testbedDoc `json:"testbed"`
		Runs    []result   `json:"runs"`
		Versus  []versus   `json:"mroce_vs_pinned_tcp"`
		Sharing []share    `json:"sharing"`
	}{s.bedDoc(), s.runs, s.versus, s.shares}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(doc)
}

func (s *sitting) writeText(w io.Writer) error {
	d := s.bedDoc()
	fmt.Fprintf(w, "Testbed: %d planes of %d Mbit/s (tbf in the router towards the receiver, burst %d B, drop-tail queue %d KiB), MTU 1500, offloads %s\n",
		d.Planes, d.RateMbit, d.BurstBytes, d.QueueKiB, d.Offloads)
	fmt.Fprintf(w, "Loss: nftables in the router, numgen random, on every plane in both directions. %d MiB a transfer, at most %g s.\n", d.SizeMiB, d.MaxSeconds)
	fmt.Fprintf(w, "Machine: %d CPUs, Linux %s, load average %s before and %s after.\n", d.CPUs, d.Kernel, d.LoadBefore, d.LoadAfter)
	for _, n := range d.Notes {
		fmt.Fprintf(w, "Note: %s.\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// The last column, a note, is left out of the alignment.
	row := func(cols ...string) { fmt.Fprintln(tw, strings.Join(cols, "\t")) }
	f := func(format string, v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf(format, v)
	}
	table := func(title string, keep func(result) bool) {
		var rs []result
		for _, r := range s.runs {
			if keep(r) {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s\n", title)
		head := []string{fmt.Sprintf("%-24s", "run"), "loss %", "Gb/s", "of capacity", "/loss-free", "/loss-free/(1-p)", "CPU s/GB send", "recv", "both", "retransmits", "router lost %"}
		if s.cfg.ce > 0 {
			head = append(head, "CE marked", "CE echoed")
		}
		row(append(head, "machine busy %", "")...)
		for _, r := range rs {
			note := ""
			switch {
			case r.Error != "":
				note = "  failed: " + r.Error
			case r.Capped:
				note = "  stopped at the time limit"
			case !r.Verified:
				note = "  not verified"
			}
			lost := 0.0
			if r.Router.Seen > 0 {
				lost = float64(r.Router.Lost) / float64(r.Router.Seen) * 100
			}
			cols := []string{fmt.Sprintf("%-24s", r.label()), fmt.Sprintf("%g", r.Loss*100), f("%.3f", r.Gbps), f("%.3f", r.OfCapacity), f("%.3f", r.VsLossFree), f("%.3f", r.VsTarget),
				f("%.2f", r.PerGB.Sender), f("%.2f", r.PerGB.Receiver), f("%.2f", r.PerGB.Total), fmt.Sprint(r.Retransmits), fmt.Sprintf("%.2f", lost)}
			if s.cfg.ce > 0 {
				cols = append(cols, fmt.Sprint(r.Router.Marked), fmt.Sprint(r.CEEchoed))
			}
			row(append(cols, fmt.Sprintf("%.0f", r.MachineBusy*100), note)...)
		}
		tw.Flush()
	}
	table(fmt.Sprintf("mroce: one connection, %d paths over %d planes", s.cfg.paths, s.cfg.planes), func(r result) bool { return r.Kind == "mroce" })
	for _, cc := range s.ccs {
		table(fmt.Sprintf("TCP %s: one connection on plane 0, and one pinned to each plane", cc), func(r result) bool { return r.Kind == "tcp" && r.CC == cc })
	}
	if len(s.versus) > 0 {
		fmt.Fprintf(w, "\nmroce against TCP with a connection pinned to each of the %d planes\n", s.cfg.planes)
		row("loss %", "TCP", "mroce Gb/s", "TCP Gb/s", "mroce/TCP goodput", "mroce/TCP CPU s/GB", "")
		for _, v := range s.versus {
			row(fmt.Sprintf("%g", v.Loss*100), v.CC, fmt.Sprintf("%.3f", v.MroceGbps), fmt.Sprintf("%.3f", v.TCPGbps), fmt.Sprintf("%.3f", v.Goodput), fmt.Sprintf("%.3f", v.CPU), "")
		}
		tw.Flush()
	}
	if len(s.shares) > 0 {
		fmt.Fprintf(w, "\nSharing, no loss: mroce and TCP (a connection pinned to each plane) at once, over mroce's transfer\n")
		row("TCP", "mroce Gb/s", "TCP Gb/s", "of capacity", "mroce share", "TCP share", "mroce/equal", "TCP/equal", "")
		for _, sh := range s.shares {
			if sh.Error != "" {
				row(sh.CC, "-", "-", "-", "-", "-", "-", "-", "  failed: "+sh.Error)
				continue
			}
			note := ""
			if sh.Capped {
				note = "  mroce stopped at the time limit"
			}
			row(sh.CC, fmt.Sprintf("%.3f", sh.MroceGbps), fmt.Sprintf("%.3f", sh.TCPGbps), fmt.Sprintf("%.3f", sh.OfCapacity),
				fmt.Sprintf("%.3f", sh.MroceShare), fmt.Sprintf("%.3f", sh.TCPShare), fmt.Sprintf("%.3f", sh.MroceEqual), fmt.Sprintf("%.3f", sh.TCPEqual), note)
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\nGb/s: payload bits a second, from the first data to the receiver's verdict on the SHA-256; of capacity: of all planes' rate.")
	fmt.Fprintln(w, "CPU s/GB: user and system seconds of each end's process per 10^9 bytes. mroce and TCP alike generate the data (ChaCha8) and hash it at both ends (SHA-256).")
	fmt.Fprintln(w, "The kernel forwards a veth's packets in the context of the process that sent them, so the sender's time holds much of the router's and receiver's; the sum is the figure.")
	fmt.Fprintln(w, "/loss-free/(1-p): the goodput at loss p over the same run's loss-free goodput, over 1-p. Machine busy: both cores, every process. Equal share: a half.")
	return nil
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}
