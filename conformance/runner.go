package conformance

import (
	"bufio"
	"cmp"
	"context"
	cryptorand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/clock"
	"github.com/mroce/mroce/internal/pcapio"
	"github.com/mroce/mroce/link"
	"github.com/mroce/mroce/netem"
	"github.com/mroce/mroce/proto"
)

// The endpoint contract says how the runner starts an implementation. It
// runs the implementation's command with this environment.
//
//	ROLE       requester or responder
//	TESTCASE   the case's name
//	PLANES     the local addresses to bind, one per plane, comma-separated
//	PORT       the responder's UDP port, which it listens on on every plane
//	PEER       the responder's addresses, one per plane, given to the requester
//	SIZE       bytes the requester moves
//	REQUESTERS how many requesters connect to the responder, each moving SIZE bytes, 1 if unset
//	START      when requesters of a case with many begin moving data, in Unix nanoseconds, after connecting
//	LOGDIR     a directory for the endpoint's report.json and logs
//	PSK_FILE   in the cases of the authenticated mode, a file holding the
//	           pre-shared key as text (docs/spec.md section 13)
//	TIMEOUT    how long the case may take, in seconds; the endpoint's own deadlines keep within it
//
// A responder creates the empty file LOGDIR/ready once it listens. The
// runner starts the requesters when it appears, or after ReadyWait if it
// does not.
//
// The requester moves SIZE bytes of the deterministic data Data(SIZE) to
// the responder, by WRITE or SEND as it chooses, and the responder checks
// them. Each writes an EndpointReport to LOGDIR/report.json. It exits 0
// on success, 127 for a case it does not support, and anything else for a
// failure.

// ReadyFile is the file a responder creates in LOGDIR once it listens.
const ReadyFile = "ready"

// ReadyWait is how long the runner waits for a responder's ReadyFile
// before it starts the requesters all the same, for an implementation
// that does not write one.
const ReadyWait = 10 * time.Second

// Data is the deterministic data a requester moves. It is the same for
// every implementation, so that a responder can be checked against it.
func Data(size int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{'c', 'o', 'n', 'f', 'o', 'r', 'm'}), size)
}

// EndpointReport is what an endpoint writes to LOGDIR/report.json.
type EndpointReport struct {
	Role string `json:"role"`
	// Bytes is the bytes moved, and SHA256 the hex SHA-256 of the data as
	// sent or received.
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Packets, Retransmits and CEMarks are the requester's counters. They
	// count the data packets it sent, the retransmissions among them, and
	// the CE marks its peer reported.
	Packets     uint64 `json:"packets"`
	Retransmits uint64 `json:"retransmits"`
	CEMarks     uint64 `json:"ce_marks"`
	// Timeouts and Lost count the requester's retransmission timeouts and
	// the packets it declared lost. They are informative.
	Timeouts uint64 `json:"timeouts,omitempty"`
	Lost     uint64 `json:"lost,omitempty"`
	// TailProbes counts the Retransmits that resent a path's newest
	// unresolved packet to elicit an ACK, by spec section 6.6; a tail
	// probe of new data is not one. No loss caused them.
	TailProbes uint64 `json:"tail_probes,omitempty"`
	// Copies counts the Retransmits that sent a tail probe or a resend a
	// second time, on another plane, so that losing one of the two costs
	// no timeout (docs/cc.md). Each duplicates one of them.
	Copies uint64 `json:"copies,omitempty"`
	// Completions counts what the responder's application saw complete,
	// 1 for one message.
	Completions int `json:"completions,omitempty"`
	// ElapsedNS is the requester's transfer time, from its first
	// operation to its last completion. It gives the goodput.
	ElapsedNS int64  `json:"elapsed_ns,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Unsupported is the exit status of an endpoint that does not support a
// case.
const Unsupported = 127

// runnerSeed seeds the emulator of every runner case.
const runnerSeed = 1

// captureSnap is how much of each datagram the case's capture keeps. That
// is every header, an ACK's records and the start of a data packet's
// payload.
const captureSnap = 1200

// Implementation is a command that follows the endpoint contract.
type Implementation struct {
	Name string
	Cmd  []string // the command and its arguments
}

// RunPair runs every case with requester and responder through the
// emulator emu, writing logs under dir. Relay needs no root, and TUN needs
// Linux and root. It returns a result per case that names the pair and
// reads pass, fail or unsupported.
func RunPair(emu string, requester, responder Implementation, cases []RunnerCase, dir string, timeout time.Duration) []Result {
	var out []Result
	for _, c := range cases {
		began := time.Now()
		caseDir := filepath.Join(dir, c.Name)
		res, details := runCase(emu, requester, responder, c, caseDir, timeout)
		r := Result{Case: c.Name, Result: res, Details: details, Spec: "runner", Elapsed: time.Since(began),
			Requester: requester.Name, Responder: responder.Name,
			Scenario: fmt.Sprintf("%s emulator: %d planes of 1 Gb/s, %d requester(s) of %d MiB", cmp.Or(emu, Relay), c.Planes, max(1, c.Requesters), c.Size>>20),
			Seed:     runnerSeed, Logs: caseDir}
		if _, err := os.Stat(filepath.Join(caseDir, "emulator.pcap")); err == nil {
			r.Pcap = filepath.Join(caseDir, "emulator.pcap")
		}
		out = append(out, r)
	}
	return out
}

// RunMatrix runs the interop matrix. It runs every case for every ordered
// pair of impls, pair after pair, with each as requester against each as
// responder, itself included. With one implementation the logs are under
// dir/CASE, and with more under dir/REQUESTER/RESPONDER/CASE.
func RunMatrix(emu string, impls []Implementation, cases []RunnerCase, dir string, timeout time.Duration) []Result {
	var out []Result
	for _, req := range impls {
		for _, resp := range impls {
			d := dir
			if len(impls) > 1 {
				d = filepath.Join(dir, req.Name, resp.Name)
			}
			out = append(out, RunPair(emu, req, resp, cases, d, timeout)...)
		}
	}
	return out
}

// runCase runs one case and returns its result and the details of a
// failure. It starts the emulator, watches the wire, runs the endpoints
// and judges what they and the wire report.
func runCase(emu string, req, resp Implementation, c RunnerCase, dir string, timeout time.Duration) (string, string) {
	cr := &caseRun{c: c, n: max(1, c.Requesters), dir: dir}
	if err := cr.makeDirs(); err != nil {
		return "fail", err.Error()
	}
	l := link1G()
	fc := netem.Config{Seed: runnerSeed, Uplink: l, Downlink: l}
	if c.Fabric != nil {
		c.Fabric(&fc)
	}
	em, err := startEmulator(emu, cr.n+1, c.Planes, fc)
	if err != nil {
		return "fail", "the emulator: " + err.Error()
	}
	defer em.Close()
	cr.em = em
	cr.wire = newWireWatch(em, c.Faults)
	stop, err := cr.wire.startCapture(filepath.Join(dir, "emulator.pcap"))
	if err != nil {
		return "fail", err.Error()
	}
	defer stop()
	em.Do(func(f *netem.Fabric) { f.AddTap(func(e *netem.TapEvent) { cr.wire.see(f, e) }) })
	if res, details := cr.runEndpoints(req, resp, timeout); res != "pass" {
		return res, details
	}
	o, reused, err := cr.observe()
	if err != nil {
		return "fail", err.Error()
	}
	// An endpoint never sends a data packet with a PSN it already used on
	// the same path of the same connection, by spec section 6.2. Every
	// runner case is in multipath mode.
	if reused > 0 {
		return "fail", fmt.Sprintf("%d data packets reused a PSN of their path (spec section 6.2)", reused)
	}
	if err := c.Judge(o); err != nil {
		return "fail", err.Error()
	}
	return "pass", ""
}

// caseRun is one run of a runner case.
type caseRun struct {
	c   RunnerCase
	n   int // requesters
	dir string
	// The responder is host 1. The requesters are hosts 0, 2, 3 and on,
	// each with its own log directory.
	reqHosts []int
	reqDirs  []string
	respDir  string
	em       emulator
	wire     *wireWatch
	timeout  time.Duration // what the case may take, TIMEOUT
}

// makeDirs makes the endpoints' log directories.
func (cr *caseRun) makeDirs() error {
	cr.reqHosts = []int{0}
	for h := 2; h <= cr.n; h++ {
		cr.reqHosts = append(cr.reqHosts, h)
	}
	cr.reqDirs = []string{filepath.Join(cr.dir, "requester")}
	for i := 1; i < cr.n; i++ {
		cr.reqDirs = append(cr.reqDirs, filepath.Join(cr.dir, fmt.Sprintf("requester-%d", i+1)))
	}
	cr.respDir = filepath.Join(cr.dir, "responder")
	for _, d := range append([]string{cr.respDir}, cr.reqDirs...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if cr.c.Auth {
		psk := make([]byte, auth.PSKLen)
		if _, err := cryptorand.Read(psk); err != nil {
			return err
		}
		return os.WriteFile(cr.pskFile(), []byte(auth.FormatKey(psk)+"\n"), 0o600)
	}
	return nil
}

// addrs lists host h's addresses, one per plane. They are those it binds,
// or with reach those its peers send to.
func (cr *caseRun) addrs(reach bool, h int) string {
	var s []string
	for p := 0; p < cr.c.Planes; p++ {
		a := cr.em.local(h, p)
		if reach {
			a = cr.em.reach(h, p)
		}
		s = append(s, a.String())
	}
	return strings.Join(s, ",")
}

// env is an endpoint's environment under the endpoint contract.
func (cr *caseRun) env(role, planes, peer, logdir string) []string {
	e := append(os.Environ(), "ROLE="+role, "TESTCASE="+cr.c.Name, "PLANES="+planes, "PEER="+peer,
		fmt.Sprintf("PORT=%d", cr.em.port()), fmt.Sprintf("SIZE=%d", cr.c.Size), fmt.Sprintf("REQUESTERS=%d", cr.n), "LOGDIR="+logdir,
		fmt.Sprintf("TIMEOUT=%g", cr.timeout.Seconds()))
	if cr.c.Auth {
		e = append(e, "PSK_FILE="+cr.pskFile())
	}
	return e
}

// pskFile is the case's pre-shared key, which makeDirs writes.
func (cr *caseRun) pskFile() string { return filepath.Join(cr.dir, "psk") }

// start starts impl as host h with environment e, its output logged in
// logdir.
func (cr *caseRun) start(ctx context.Context, impl Implementation, h int, e []string, logdir string) (*exec.Cmd, error) {
	cmd := cr.em.command(ctx, h, impl.Cmd)
	cmd.Env = e
	out, err := os.Create(filepath.Join(logdir, "output.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out // the child writes to the file itself
	err = cmd.Start()
	out.Close()
	return cmd, err
}

// runEndpoints starts the responder, then the requesters once it
// listens, and waits for them all. It returns "pass" when every endpoint
// exited 0, and otherwise the case's result and details.
func (cr *caseRun) runEndpoints(req, resp Implementation, timeout time.Duration) (string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cr.timeout = timeout
	rcmd, err := cr.start(ctx, resp, 1, cr.env("responder", cr.addrs(false, 1), "", cr.respDir), cr.respDir)
	if err != nil {
		return "fail", "starting the responder: " + err.Error()
	}
	respDone := make(chan error, 1)
	go func() { respDone <- rcmd.Wait() }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for waited := time.Now(); ; {
		select {
		case err := <-respDone:
			if code(err) == Unsupported {
				return "unsupported", ""
			}
			return "fail", fmt.Sprintf("the responder exited before the requesters started: %v (logs in %s)", err, cr.dir)
		case <-tick.C:
		}
		if _, err := os.Stat(filepath.Join(cr.respDir, ReadyFile)); err == nil || time.Since(waited) > ReadyWait {
			break // it listens, or it says nothing of it
		}
	}
	// Many requesters are processes started one after another. They are
	// told when to begin, late enough for the last to have connected. An
	// empty START makes one begin at once, whatever the runner's own
	// environment says.
	startAt := "START="
	if cr.n > 1 {
		startAt = fmt.Sprintf("START=%d", time.Now().Add(300*time.Millisecond+time.Duration(cr.n)*40*time.Millisecond).UnixNano())
	}
	var qcmds []*exec.Cmd
	for i, h := range cr.reqHosts {
		qcmd, err := cr.start(ctx, req, h, append(cr.env("requester", cr.addrs(false, h), cr.addrs(true, 1), cr.reqDirs[i]), startAt), cr.reqDirs[i])
		if err != nil {
			for _, q := range qcmds {
				q.Process.Kill()
			}
			rcmd.Process.Kill()
			return "fail", "starting a requester: " + err.Error()
		}
		qcmds = append(qcmds, qcmd)
	}
	var qerr error
	unsupported := false
	for _, q := range qcmds {
		err := q.Wait()
		unsupported = unsupported || code(err) == Unsupported
		if err != nil && qerr == nil {
			qerr = err
		}
	}
	var rerr error
	switch {
	case unsupported:
		rcmd.Process.Kill() // nothing more is coming, and it would wait for its own timeout
		rerr = <-respDone
	case qerr != nil:
		rerr = quitThenKill(rcmd, respDone, time.Second)
	default:
		rerr = <-respDone
	}
	if unsupported || code(rerr) == Unsupported {
		return "unsupported", ""
	}
	if qerr != nil || rerr != nil {
		return "fail", fmt.Sprintf("requester %v, responder %v (logs in %s)", qerr, rerr, cr.dir)
	}
	return "pass", ""
}

// quitThenKill ends an endpoint that nothing more will come to, whose
// Wait's result arrives on done. It sends SIGQUIT first, and kills it if
// it has not exited after grace. A Go endpoint then writes every
// goroutine's stack to its log: if it had stopped answering, the log shows
// where it was.
func quitThenKill(cmd *exec.Cmd, done <-chan error, grace time.Duration) error {
	if cmd.Process.Signal(syscall.SIGQUIT) == nil {
		select {
		case err := <-done:
			return err
		case <-time.After(grace):
		}
	}
	cmd.Process.Kill()
	return <-done
}

// observe reads the endpoints' reports and the wire's counts into what
// the judge sees. It also returns how many data packets reused a PSN.
func (cr *caseRun) observe() (Observed, int, error) {
	var o Observed
	for _, d := range cr.reqDirs {
		var rep EndpointReport
		if err := readReport(d, &rep); err != nil {
			return o, 0, err
		}
		o.Requesters = append(o.Requesters, rep)
	}
	o.Requester = o.Requesters[0]
	if err := readReport(cr.respDir, &o.Responder); err != nil {
		return o, 0, err
	}
	var reused int
	w := cr.wire
	cr.em.Do(func(f *netem.Fabric) {
		o.PerPlane = f.BytesTo(responderHost)
		o.Dropped, o.DroppedControl, o.AtFaults = w.dropped, w.droppedControl, w.atFaults
		reused = w.reused
		o.CEDelivered, o.CEEchoed, o.Connections = w.ceDelivered, w.ceEchoed, len(w.respConns)
		o.DataPackets, o.DataDelivered = w.dataPackets, w.dataDelivered
		o.Protected, o.Clear = w.protected, w.clear
	})
	return o, reused, nil
}

// wireWatch is what the runner sees of a case on the emulator's wire. Its
// tap runs on the emulator's goroutine, and its counts are read there.
type wireWatch struct {
	em     emulator
	faults []netem.Fault

	// pcap records every datagram the emulator delivers, as it leaves the
	// last link, while capturing is set. origin is the capture's time
	// zero.
	pcap      *pcapio.Writer
	capturing bool
	origin    time.Time

	// dropped and droppedControl count the data and control packets the
	// emulator dropped.
	dropped, droppedControl uint64
	// atFaults holds the bytes each plane had delivered to the responder
	// when each fault took effect. faultsArmed is set once the faults are
	// scheduled, at the first data packet.
	atFaults    [][]uint64
	faultsArmed bool
	// psnSeen holds every data packet's PSN as it entered the emulator,
	// and reused counts those seen before.
	psnSeen map[psnKey]struct{}
	reused  int
	// dataPackets counts the data packets that entered the emulator and
	// dataDelivered those it delivered to the responder.
	dataPackets, dataDelivered uint64
	// ceDelivered counts per path the data packets delivered to the
	// responder marked CE, and ceEchoed holds the highest CECount the
	// responder's ACK records carried for the path.
	ceDelivered, ceEchoed map[uint8]uint32
	// protected and clear count the packets of connections, all but the
	// handshake's and CLOSEs, that entered the emulator protected and not.
	protected, clear uint64
	// respConns holds the connections data reached the responder on.
	respConns map[uint32]bool
}

// psnKey names a PSN of one path of one connection, as the wire shows it.
type psnKey struct {
	conn uint32
	path uint8
	psn  uint32
}

func newWireWatch(em emulator, faults []netem.Fault) *wireWatch {
	return &wireWatch{em: em, faults: faults, psnSeen: map[psnKey]struct{}{},
		ceDelivered: map[uint8]uint32{}, ceEchoed: map[uint8]uint32{}, respConns: map[uint32]bool{}}
}

// startCapture opens the capture file at path. stop ends the capture on
// the emulator's goroutine and closes the file.
func (w *wireWatch) startCapture(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	buffered := bufio.NewWriter(f)
	w.pcap, err = pcapio.NewWriterSnap(buffered, captureSnap)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.capturing = true
	w.origin = time.Now()
	return func() {
		w.em.Do(func(*netem.Fabric) { w.capturing = false; buffered.Flush() })
		f.Close()
	}, nil
}

// see is the tap. It captures, counts and arms the faults at the first
// data packet.
func (w *wireWatch) see(f *netem.Fabric, e *netem.TapEvent) {
	d := e.Datagram
	pkt, ok := w.em.payload(d)
	if !ok || len(pkt) < 2 {
		return
	}
	if w.capturing && e.Verdict == netem.Sent && e.Link.Kind() == netem.Downlink {
		w.pcap.WriteDatagram(w.origin.Add(time.Duration(e.At)), d.Src, d.Dst, d.DSCP, d.ECN, pkt)
	}
	data := proto.Type(pkt[1]).IsData()
	// A packet entered the emulator when its first link accepted it,
	// marked there or not.
	entered := (e.Verdict == netem.Queued || e.Verdict == netem.Marked) && e.Link.Kind() == netem.Uplink
	if data && entered && len(pkt) >= proto.CommonHeaderLen {
		h := proto.CommonHeader(pkt[:proto.CommonHeaderLen])
		k := psnKey{h.DstConnID(), h.PathID(), h.PSN()}
		if _, seen := w.psnSeen[k]; seen {
			w.reused++
		}
		w.psnSeen[k] = struct{}{}
		w.dataPackets++
	}
	if data && e.Verdict == netem.Sent && e.Link.Kind() == netem.Downlink && e.Link.To() == responderHost && len(pkt) >= proto.CommonHeaderLen {
		h := proto.CommonHeader(pkt[:proto.CommonHeaderLen])
		w.respConns[h.DstConnID()] = true
		w.dataDelivered++
		if d.ECN == link.CE {
			w.ceDelivered[h.PathID()]++
		}
	}
	if proto.Type(pkt[1]) == proto.TypeAck && entered && e.Link.From() == responderHost {
		w.readEcho(pkt)
	}
	if t := proto.Type(pkt[1]); entered && t != proto.TypeConnect && t != proto.TypeAccept && t != proto.TypeRetry && t != proto.TypeClose {
		if proto.CommonHeader(pkt).Protected() {
			w.protected++
		} else {
			w.clear++
		}
	}
	if data && !w.faultsArmed {
		w.armFaults(f, e.At)
	}
	if e.Verdict != netem.Dropped {
		return
	}
	if data {
		w.dropped++
	} else {
		w.droppedControl++
	}
}

// readEcho notes the CECount of each record of the responder's ACK. ACKs
// may come back out of order over either plane. The count only rises, so
// the highest is the latest.
func (w *wireWatch) readEcho(pkt []byte) {
	var ack proto.Packet
	if ack.Decode(pkt) != nil {
		return
	}
	for i := range int(ack.Ack().RecordCount()) {
		rec := ack.AckRecord(i)
		if cur, ok := w.ceEchoed[rec.PathID()]; !ok || proto.SeqLess(cur, rec.CECount()) {
			w.ceEchoed[rec.PathID()] = rec.CECount()
		}
	}
}

// armFaults schedules the case's faults, timed from the first data packet
// at. Each notes what the planes had delivered when it hit.
func (w *wireWatch) armFaults(f *netem.Fabric, at clock.Time) {
	w.faultsArmed = true
	for _, ft := range w.faults {
		if err := f.ScheduleFault(time.Duration(at)+ft.At, ft); err == nil {
			f.After(time.Duration(at)+ft.At, func() { w.atFaults = append(w.atFaults, f.BytesTo(responderHost)) })
		}
	}
}

func code(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return 0
}

func readReport(dir string, into *EndpointReport) error {
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return fmt.Errorf("no report: %w", err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, "report.json"), err)
	}
	return nil
}

// ParseAddrs reads a comma-separated list of addresses, as PLANES and
// PEER hold.
func ParseAddrs(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address", f)
		}
		out = append(out, a)
	}
	return out, nil
}
