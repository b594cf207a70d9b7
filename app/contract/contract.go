// Package contract is mroce's side of the endpoint contract that the
// conformance runner drives, as mroce conformance endpoint runs it.
//
// The runner starts every endpoint as a process of its own and tells it
// what to do through environment variables, so that any implementation
// can take part with a small wrapper. ParseEnv reads those variables, and
// Run plays the role they name, moves or checks the data and writes the
// report the runner's judges read. docs/conformance.md gives the contract
// and its cases.
package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/mroce/mroce/app/host"
	"github.com/mroce/mroce/auth"
	"github.com/mroce/mroce/conformance"
	"github.com/mroce/mroce/conformance/bugs"
	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/endpoint/software"
	"github.com/mroce/mroce/engine"
)

// The roles of the contract.
const (
	Requester = "requester"
	Responder = "responder"
)

// ErrUnsupported is the error of a case this mroce does not run. The
// runner expects the exit status conformance.Unsupported for it.
var ErrUnsupported = errors.New("contract: a case this mroce does not run")

// Config is one endpoint's part in a case, as the runner sets it.
type Config struct {
	Role, Case string
	// Planes are the local addresses, one per plane. Peer holds the
	// responder's, for a requester.
	Planes, Peer []netip.Addr
	// Port is the responder's UDP port. The requester binds it too, so
	// that the sender probe knows where its packets come from.
	Port uint16
	// Size is how many bytes each requester moves.
	Size int64
	// Requesters is how many requesters connect to a responder at once.
	Requesters int
	// Start is when the requesters of an incast case begin to move data,
	// after they connected. Zero begins at once.
	Start time.Time
	// LogDir receives report.json.
	LogDir string
	// Broken holds the deliberate bugs MROCE_BREAK builds into this side
	// for the conformance suite's self-test. It is not a user's option.
	Broken bugs.Set
	// PSK, from PSK_FILE, puts this side in the authenticated mode with
	// that pre-shared key (docs/spec.md section 13). Nil leaves it out.
	PSK []byte
	// Timeout, from TIMEOUT, is how long the whole case may take; this
	// side's own deadlines keep within it. DefaultTimeout without it.
	Timeout time.Duration
	// Trace, from MROCE_TRACE=1, asks for the engine's decisions in
	// LogDir/TraceFile, which the caller opens for Tracer. It is this
	// mroce's own variable, not the contract's.
	Trace bool
	// Tracer, when set, hears of the engine's decisions.
	Tracer engine.Tracer
}

// TraceFile is the file in LOGDIR that MROCE_TRACE=1 asks for.
const TraceFile = "trace.jsonl"

// DefaultTimeout is a case's time when the runner gives none.
const DefaultTimeout = time.Minute

// timeout is the case's time: Timeout, or DefaultTimeout when unset.
func (cfg Config) timeout() time.Duration {
	if cfg.Timeout <= 0 {
		return DefaultTimeout
	}
	return cfg.Timeout
}

// ReadyFile is the file a responder creates in LOGDIR once it listens,
// which the runner waits for before it starts the requesters.
const ReadyFile = conformance.ReadyFile

// ParseEnv reads the contract's variables through getenv, os.Getenv in a
// real endpoint. It returns ErrUnsupported for a case it does not know,
// before it looks at anything else, as the contract asks.
func ParseEnv(getenv func(string) string) (Config, error) {
	cfg := Config{Role: getenv("ROLE"), Case: getenv("TESTCASE"), LogDir: getenv("LOGDIR"), Requesters: 1, Timeout: DefaultTimeout}
	if !slices.ContainsFunc(conformance.RunnerCases, func(c conformance.RunnerCase) bool { return c.Name == cfg.Case }) {
		return cfg, ErrUnsupported
	}
	var err error
	if cfg.Planes, err = conformance.ParseAddrs(getenv("PLANES")); err != nil || len(cfg.Planes) == 0 {
		return cfg, fmt.Errorf("PLANES %q: %v", getenv("PLANES"), err)
	}
	port, err := strconv.ParseUint(getenv("PORT"), 10, 16)
	if err != nil || port == 0 {
		return cfg, fmt.Errorf("PORT %q", getenv("PORT"))
	}
	cfg.Port = uint16(port)
	if cfg.Size, err = strconv.ParseInt(getenv("SIZE"), 10, 64); err != nil || cfg.Size < 0 {
		return cfg, fmt.Errorf("SIZE %q", getenv("SIZE"))
	}
	if v := getenv("REQUESTERS"); v != "" {
		if cfg.Requesters, err = strconv.Atoi(v); err != nil || cfg.Requesters < 1 || cfg.Requesters > 1000 {
			return cfg, fmt.Errorf("REQUESTERS %q: want 1 to 1000", v)
		}
	}
	if v := getenv("START"); v != "" {
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return cfg, fmt.Errorf("START %q: want Unix nanoseconds", v)
		}
		cfg.Start = time.Unix(0, ns)
	}
	switch cfg.Role {
	case Responder:
	case Requester:
		if cfg.Peer, err = conformance.ParseAddrs(getenv("PEER")); err != nil || len(cfg.Peer) != len(cfg.Planes) {
			return cfg, fmt.Errorf("PEER %q: want one address for each plane of PLANES", getenv("PEER"))
		}
	default:
		return cfg, fmt.Errorf("ROLE %q: want requester or responder", cfg.Role)
	}
	if cfg.Broken, err = bugs.ForRole(getenv("MROCE_BREAK"), cfg.Role); err != nil {
		return cfg, fmt.Errorf("MROCE_BREAK %w", err)
	}
	switch v := getenv("MROCE_TRACE"); v {
	case "", "0":
	case "1":
		if cfg.LogDir == "" {
			return cfg, errors.New("MROCE_TRACE=1: wants LOGDIR for its file")
		}
		cfg.Trace = true
	default:
		return cfg, fmt.Errorf("MROCE_TRACE %q: want 1 or 0", v)
	}
	if v := getenv("TIMEOUT"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 || s > 24*3600 {
			return cfg, fmt.Errorf("TIMEOUT %q: want seconds, above 0", v)
		}
		cfg.Timeout = time.Duration(s * float64(time.Second))
	}
	if path := getenv("PSK_FILE"); path != "" {
		text, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("PSK_FILE: %w", err)
		}
		if cfg.PSK, err = auth.ParseKey(string(text)); err != nil {
			return cfg, fmt.Errorf("PSK_FILE %s: %w", path, err)
		}
	}
	return cfg, nil
}

// Run plays cfg's role in its case and writes LogDir/report.json, also
// when the case fails, so that the runner can show why. It returns the
// case's error.
func Run(ctx context.Context, cfg Config) error {
	rep := conformance.EndpointReport{Role: cfg.Role}
	var err error
	switch {
	case cfg.Role == Responder && isOperation(cfg.Case):
		err = opResponder(ctx, cfg, &rep)
	case cfg.Role == Responder:
		err = transferResponder(ctx, cfg, &rep)
	case isOperation(cfg.Case):
		err = opRequester(ctx, cfg, &rep)
	default:
		err = transferRequester(ctx, cfg, &rep)
	}
	if err != nil {
		rep.Error = err.Error()
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	if werr := os.WriteFile(filepath.Join(cfg.LogDir, "report.json"), b, 0o644); werr != nil && err == nil {
		err = werr
	}
	return err
}

// isOperation reports whether the case fixes the operations. The other
// cases leave them to the requester, and mroce moves the data with
// filexfer.
func isOperation(testcase string) bool {
	return testcase == "write" || testcase == "write-imm" || testcase == "read"
}

// openHost opens this endpoint on its planes, binding Port, with the
// deliberate bugs of cfg between the engine and the sockets. It returns
// the host to close and a device and protection domain on it.
func openHost(cfg Config) (*host.Host, *endpoint.Device, *endpoint.PD, error) {
	// A requester may start before its responder listens, when the runner
	// gave up waiting for the ready file: its handshake goes on for as
	// long as dial waits, resending its CONNECT.
	o := host.Options{Port: cfg.Port, Paths: 8, SourcePorts: 16, NoProgress: 30 * time.Second, ConnectTimeout: dialWait, Tracer: cfg.Tracer}
	if cfg.PSK != nil {
		o.Auth = &auth.Credentials{Method: auth.MethodPSK, PSK: cfg.PSK}
	}
	if !cfg.Broken.Empty() {
		o.Wrappers = []software.Wrapper{cfg.Broken.Wrapper}
	}
	h, err := host.Open(cfg.Planes, o)
	if err != nil {
		return nil, nil, nil, err
	}
	dev := h.Device()
	pd, err := dev.AllocPD()
	if err != nil {
		h.Close()
		return nil, nil, nil, err
	}
	return h, dev, pd, nil
}

// ready tells the runner that this responder listens (the contract's
// ReadyFile), so that it starts the requesters.
func ready(cfg Config) error {
	if cfg.LogDir == "" {
		return nil
	}
	return os.WriteFile(filepath.Join(cfg.LogDir, ReadyFile), nil, 0o644)
}

// dialWait is how long a requester's handshake may take.
const dialWait = 10 * time.Second

// dial connects to the responder, giving the handshake dialWait.
func dial(ctx context.Context, cfg Config, pd *endpoint.PD, send, recv *endpoint.CQ) (*endpoint.QP, error) {
	cctx, cancel := context.WithTimeout(ctx, dialWait)
	defer cancel()
	return pd.Connect(cctx, endpoint.Remote{Planes: cfg.Peer, Port: cfg.Port}, send, recv, endpoint.QPOptions{})
}

// waitStart waits until cfg.Start, when all the requesters of an incast
// case begin together.
func waitStart(ctx context.Context, cfg Config) error {
	if cfg.Start.IsZero() {
		return nil
	}
	select {
	case <-time.After(time.Until(cfg.Start)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reportPaths adds the requester's path counters to its report.
func reportPaths(qp *endpoint.QP, rep *conformance.EndpointReport) {
	for _, p := range qp.Telemetry() {
		rep.Packets += p.PacketsSent
		rep.Retransmits += p.Retransmits
		rep.CEMarks += p.CEMarks
		rep.Timeouts += p.Timeouts
		rep.Lost += p.Lost
		rep.TailProbes += p.TailProbes
		rep.Copies += p.Copies
	}
}
