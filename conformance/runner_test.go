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
