package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"

	"github.com/mroce/mroce/app/filexfer"
	"github.com/mroce/mroce/app/xferstats"
	"github.com/mroce/mroce/endpoint"
)

// transferPrinter prints a transfer of send or recv while it runs and at
// its end, as text or as one JSON document.
type transferPrinter struct {
	meter  xferstats.Meter
	report xferstats.Report
	out    io.Writer
	text   bool
	bar    *progressbar.ProgressBar
}

// newPrinter starts the report of one side of a transfer.
func newPrinter(role string, out io.Writer, o transferOptions, local, remote []netip.Addr) *transferPrinter {
	p := &transferPrinter{out: out, text: !o.json,
		report: xferstats.Report{Role: role, Port: o.port, Paths: o.paths, Mode: "mroce"}}
	if o.baseline {
		p.report.Mode = "baseline"
	}
	for _, a := range local {
		p.report.Local = append(p.report.Local, a.String())
	}
	for _, a := range remote {
		p.report.Remote = append(p.report.Remote, a.String())
	}
	return p
}

// progress notes the bytes moved. The transfer's goroutine calls it.
func (p *transferPrinter) progress(pr filexfer.Progress) {
	p.meter.Progress(pr.Bytes)
	if p.bar != nil {
		p.bar.Set64(pr.Bytes)
	}
}

// tick closes an interval and prints it. tel is nil on the receiving
// side, which has no counters of the sender's paths.
func (p *transferPrinter) tick(tel []endpoint.PathTelemetry) {
	iv, ok := p.meter.Tick(tel)
	if ok && p.text {
		p.clearBar()
		printInterval(p.out, iv, false, tel != nil)
	}
}

// printInterval prints one interval on a line. The demo's intervals are
// microseconds of virtual time, so micro prints them in µs.
func printInterval(w io.Writer, iv xferstats.Interval, micro, counters bool) {
	if micro {
		fmt.Fprintf(w, "[%6.0f-%6.0f µs]  %9s  %7.2f Gb/s", iv.Start*1e6, iv.End*1e6, sizeText(iv.Bytes), iv.Gbps)
	} else {
		fmt.Fprintf(w, "[%6.2f-%6.2f s]  %9s  %7.2f Gb/s", iv.Start, iv.End, sizeText(iv.Bytes), iv.Gbps)
	}
	if counters {
		fmt.Fprintf(w, "  retransmits %-6d  CE %-6d  RTT %.0f µs", iv.Retransmits, iv.CEMarks, iv.RTTMicros)
	}
	fmt.Fprintln(w)
}

// startBar shows a progress bar of size bytes on errOut. It shows none
// when errOut is not a terminal or the output is JSON, since a bar in a
// file or a pipe is noise.
func (p *transferPrinter) startBar(errOut io.Writer, size int64) {
	f, ok := errOut.(*os.File)
	if !p.text || !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return
	}
	p.bar = progressbar.NewOptions64(size, progressbar.OptionSetWriter(f), progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
}

func (p *transferPrinter) clearBar() {
	if p.bar != nil {
		p.bar.Clear()
	}
}

// finish prints the summary, and for the sender the table of paths, or
// the JSON document. It returns err, the transfer's own.
func (p *transferPrinter) finish(res filexfer.Result, tel []endpoint.PathTelemetry, err error) error {
	p.clearBar()
	r := &p.report
	if res.Header.Name != "" {
		r.Name, r.Size = res.Header.Name, res.Header.Size
	}
	end := p.meter.Summary(res.Elapsed, res.SHA256, err == nil, tel)
	r.End, r.Intervals = &end, p.meter.Intervals()
	if tel != nil {
		r.PerPath = xferstats.PathRows(tel)
	}
	if err != nil {
		r.Error = err.Error()
	}
	if !p.text {
		enc := json.NewEncoder(p.out)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(r); jerr != nil {
			return jerr
		}
		return err
	}
	if err != nil {
		return err
	}
	verdict := "SHA-256 verified by the receiver"
	if r.Role == "receiver" {
		verdict = "SHA-256 matches the sender's"
	}
	fmt.Fprintf(p.out, "%s %s in %.3f s: %.2f Gb/s; %s (%s)\n", r.Role, sizeText(end.Bytes), end.Seconds, end.Gbps, verdict, res.SHA256)
	if tel != nil {
		fmt.Fprintf(p.out, "%d retransmissions, %d CE marks", end.Retransmits, end.CEMarks)
		if end.LocalDrops > 0 {
			fmt.Fprintf(p.out, "; %d packets dropped by this host on their way out, its queue full (resent at once, the rate cut)", end.LocalDrops)
		}
		fmt.Fprint(p.out, "\n\n")
		printPaths(p.out, r.PerPath)
	}
	return nil
}

// printPaths prints what each path carried.
func printPaths(w io.Writer, rows []xferstats.PathRow) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tplane\tsource port\tstate\tRTT µs\tECN %\tshare\tpackets\tretransmits\ttimeouts\tspurious\tmoves\t")
	for _, p := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%.0f\t%.1f\t%.1f%%\t%d\t%d\t%d\t%d\t%d\t\n", p.Path, p.Plane, p.SourcePort, p.State,
			p.RTTMicros, p.ECNPercent, 100*p.Share, p.Packets, p.Retransmits, p.Timeouts, p.Spurious, p.Repaths)
	}
	tw.Flush()
}

// sizeText is n bytes in the largest binary unit that keeps a whole
// number in front.
func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// every runs f every d until stop is closed. A d of zero or less runs it
// never, which is what --interval 0 asks.
func every(d time.Duration, stop <-chan struct{}, f func()) {
	if d <= 0 {
		return
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f()
		case <-stop:
			return
		}
	}
}

// logPathEvents logs what the connection's paths did since the last call.
func logPathEvents(log *slog.Logger, qp *endpoint.QP) {
	for _, ev := range qp.PathEvents() {
		if ev.Repath {
			log.Info("path moved", "path", ev.Path, "source_port", ev.SrcPort, "epoch", ev.Epoch)
			continue
		}
		log.Info("path state", "path", ev.Path, "from", ev.From.String(), "to", ev.To.String())
	}
}
