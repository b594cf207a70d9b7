package conformance

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Data is the stream docs/conformance.md defines for another language to
// make: C2SP chacha8rand seeded with "conform", its first bytes as the
// page states them.
func TestDataIsTheDocumentedStream(t *testing.T) {
	b, err := io.ReadAll(Data(16))
	if err != nil || hex.EncodeToString(b) != "acd5beafc576070124f5130bcc693dab" {
		t.Fatalf("Data(16) = %x, %v", b, err)
	}
	if n, _ := io.Copy(io.Discard, Data(1000)); n != 1000 {
		t.Fatalf("Data(1000) gives %d bytes", n)
	}
}

// docs/report.schema.json describes EndpointReport field for field: a
// property for every JSON name, of the field's kind, required where the
// field is always written; and a report as the endpoints write it keeps
// to it.
func TestReportSchemaMatchesEndpointReport(t *testing.T) {
	text, err := os.ReadFile("../docs/report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Required   []string `json:"required"`
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
		Additional *bool `json:"additionalProperties"`
	}
	if err := json.Unmarshal(text, &schema); err != nil {
		t.Fatal(err)
	}
	if schema.Additional == nil || *schema.Additional {
		t.Error("the schema allows properties it does not name")
	}
	rt := reflect.TypeFor[EndpointReport]()
	fields := map[string]bool{}
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		fields[name] = true
		p, ok := schema.Properties[name]
		want := map[reflect.Kind]string{reflect.String: "string", reflect.Int: "integer", reflect.Int64: "integer", reflect.Uint64: "integer"}[f.Type.Kind()]
		if !ok || p.Type != want {
			t.Errorf("%s (%s): the schema has %q, want %q", name, f.Type, p.Type, want)
		}
		if required := slices.Contains(schema.Required, name); required == (opts == "omitempty") {
			t.Errorf("%s: required in the schema %v, omitempty %v", name, required, opts == "omitempty")
		}
	}
	for name := range schema.Properties {
		if !fields[name] {
			t.Errorf("the schema names %s, which EndpointReport has not", name)
		}
	}
}

// The ecn case's judge passes a sender that slowed, whose windows of about
// a dozen jumbo packets still leave up to about half of them marked, below
// two thirds, and fails one that did not slow, that never heard the marks
// or heard more than were echoed, whose responder echoed another count
// than the wire shows, or whose data did not arrive whole on one
// connection.
func TestECNJudgeTellsASenderThatSlowed(t *testing.T) {
	const size, data = 16 << 20, 1890
	seen := func(marked, echoed, heard uint32) Observed {
		report := EndpointReport{Bytes: size, SHA256: "same"}
		req := report
		req.CEMarks = uint64(heard)
		return Observed{Requester: req, Responder: report, Connections: 1, DataDelivered: data,
			CEDelivered: map[uint8]uint32{0: marked / 2, 1: marked - marked/2},
			CEEchoed:    map[uint8]uint32{0: echoed / 2, 1: echoed - echoed/2}}
	}
	judge := ecnJudge(size)
	twoConns := seen(630, 630, 630)
	twoConns.Connections = 2
	short := seen(630, 630, 630)
	short.Responder.Bytes--
	for name, o := range map[string]Observed{"two connections": twoConns, "a byte short": short} {
		if err := judge(o); err == nil {
			t.Errorf("%s: passed, want a failure", name)
		}
	}
	for _, c := range []struct {
		name                  string
		marked, echoed, heard uint32
		pass                  bool
	}{
		{"slowed, a third marked", 630, 630, 630, true},
		{"slowed, over half marked", 1053, 1053, 1053, true},
		{"just under two thirds marked", 1259, 1259, 1259, true},
		{"two thirds marked", 1260, 1260, 1260, false},
		{"heard more than were echoed", 630, 630, 631, false},
		{"did not slow", 1700, 1700, 1700, false},
		{"never heard the marks", 700, 700, 0, false},
		{"echoed fewer than the wire", 700, 690, 690, false},
		{"nothing marked", 0, 0, 0, false},
	} {
		if err := judge(seen(c.marked, c.echoed, c.heard)); (err == nil) != c.pass {
			t.Errorf("%s: %v, want a pass %v", c.name, err, c.pass)
		}
	}
}
