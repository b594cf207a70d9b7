package proto

import (
	"bufio"
	"math/big"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// viewTypes maps each layout table of docs/spec.md to the view type that
// implements it.
var viewTypes = map[string]reflect.Type{
	"CommonHeader":     reflect.TypeFor[CommonHeader](),
	"WriteHeader":      reflect.TypeFor[WriteHeader](),
	"ImmHeader":        reflect.TypeFor[ImmHeader](),
	"SendHeader":       reflect.TypeFor[SendHeader](),
	"ReadReqHeader":    reflect.TypeFor[ReadReqHeader](),
	"ReadRespHeader":   reflect.TypeFor[ReadRespHeader](),
	"AckHeader":        reflect.TypeFor[AckHeader](),
	"AckRecord":        reflect.TypeFor[AckRecord](),
	"NackHeader":       reflect.TypeFor[NackHeader](),
	"HandshakeHeader":  reflect.TypeFor[HandshakeHeader](),
	"RetryHeader":      reflect.TypeFor[RetryHeader](),
	"CloseHeader":      reflect.TypeFor[CloseHeader](),
	"ProbeHeader":      reflect.TypeFor[ProbeHeader](),
	"ProbeReplyHeader": reflect.TypeFor[ProbeReplyHeader](),
	"Trailer":          reflect.TypeFor[Trailer](),
	"AtomicHeader":     reflect.TypeFor[AtomicHeader](),
	"AtomicRespHeader": reflect.TypeFor[AtomicRespHeader](),
	"AuthHello":        reflect.TypeFor[AuthHello](),
	"AuthAccept":       reflect.TypeFor[AuthAccept](),
	"Tag":              reflect.TypeFor[Tag](),
}

// bitHelpers are view methods that are not field accessors. They read and
// set single bits of the Bitvector field, which has its own spec row.
var bitHelpers = map[string]bool{"Received": true, "MarkReceived": true, "ClearReceived": true}

var (
	layoutMarker = regexp.MustCompile(`^<!-- layout: (\w+) (\d+) -->$`)
	tableRow     = regexp.MustCompile(`^\|\s*(\w+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|`)
)

// readSpecLayouts parses every layout table of docs/spec.md.
func readSpecLayouts(t *testing.T) []PartLayout {
	t.Helper()
	f, err := os.Open("../docs/spec.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var parts []PartLayout
	var cur *PartLayout
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := layoutMarker.FindStringSubmatch(line); m != nil {
			size, _ := strconv.Atoi(m[2])
			parts = append(parts, PartLayout{Name: m[1], Size: size})
			cur = &parts[len(parts)-1]
			continue
		}
		if cur == nil {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(cur.Fields) > 0 || (line != "" && !strings.HasPrefix(line, "|")) {
				cur = nil // the table ended
			}
			continue
		}
		if m := tableRow.FindStringSubmatch(line); m != nil {
			by, _ := strconv.Atoi(m[2])
			bit, _ := strconv.Atoi(m[3])
			w, _ := strconv.Atoi(m[4])
			cur.Fields = append(cur.Fields, FieldLayout{m[1], by, bit, w})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return parts
}

func TestSpecTablesMatchLayouts(t *testing.T) {
	spec := readSpecLayouts(t)
	if len(spec) != len(Layouts) {
		t.Fatalf("spec has %d layout tables, proto.Layouts %d", len(spec), len(Layouts))
	}
	for i, sp := range spec {
		if !reflect.DeepEqual(sp, Layouts[i]) {
			t.Errorf("layout %d:\n spec  %+v\n proto %+v", i, sp, Layouts[i])
		}
	}
}

// Every bit of every part belongs to exactly one row, and no row leaves its part.
func TestSpecTablesCoverEveryBit(t *testing.T) {
	for _, part := range readSpecLayouts(t) {
		owner := make([]string, part.Size*8)
		for _, f := range part.Fields {
			if f.Width < 8 && f.Bit+f.Width > 8 || f.Width >= 8 && (f.Bit != 0 || f.Width%8 != 0) {
				t.Errorf("%s.%s: a field is either inside one byte or whole bytes", part.Name, f.Name)
			}
			for b := f.Byte*8 + f.Bit; b < f.Byte*8+f.Bit+f.Width; b++ {
				if b >= len(owner) {
					t.Errorf("%s.%s runs past the part's %d bytes", part.Name, f.Name, part.Size)
					break
				}
				if owner[b] != "" {
					t.Errorf("%s: bit %d in both %s and %s", part.Name, b, owner[b], f.Name)
				}
				owner[b] = f.Name
			}
		}
		for b, o := range owner {
			if o == "" {
				t.Errorf("%s: bit %d (byte %d) belongs to no row", part.Name, b, b/8)
			}
		}
	}
}

// For every field row of the spec, a sentinel written through the real setter
// lands at the row's offset and width and nowhere else, and reads back through
// the getter; every setter and getter of a view has a row.
func TestSpecRowsMatchAccessors(t *testing.T) {
	for _, part := range readSpecLayouts(t) {
		vt, ok := viewTypes[part.Name]
		if !ok {
			t.Errorf("spec table %s has no view type in proto", part.Name)
			continue
		}
		rows := map[string]bool{}
		for _, f := range part.Fields {
			if f.Reserved() {
				continue
			}
			rows[f.Name] = true
			checkAccessor(t, vt, part, f)
		}
		for i := 0; i < vt.NumMethod(); i++ {
			name := vt.Method(i).Name
			field := strings.TrimPrefix(name, "Set")
			if !rows[field] && !rows[name] && !bitHelpers[name] {
				t.Errorf("%s.%s is an accessor without a row in docs/spec.md", part.Name, name)
			}
		}
	}
}

func checkAccessor(t *testing.T, vt reflect.Type, part PartLayout, f FieldLayout) {
	get, okGet := vt.MethodByName(f.Name)
	set, okSet := vt.MethodByName("Set" + f.Name)
	if !okGet || !okSet {
		t.Errorf("%s.%s: spec row without getter and setter", part.Name, f.Name)
		return
	}
	start := f.Byte*8 + f.Bit
	for _, background := range []byte{0x00, 0xFF} {
		for _, sentinel := range sentinels(f.Width) {
			buf := make([]byte, part.Size)
			for i := range buf {
				buf[i] = background
			}
			view := reflect.ValueOf(buf).Convert(vt)
			arg := reflect.New(set.Type.In(1)).Elem()
			switch arg.Kind() {
			case reflect.Array:
				reflect.Copy(arg, reflect.ValueOf(sentinel.FillBytes(make([]byte, arg.Len()))))
			case reflect.Bool:
				arg.SetBool(sentinel.Sign() != 0)
			default:
				arg.SetUint(sentinel.Uint64())
			}
			set.Func.Call([]reflect.Value{view, arg})

			want := make([]byte, part.Size)
			for i := range want {
				want[i] = background
			}
			for k := 0; k < f.Width; k++ { // bit k of the field, from its MSB
				bit := sentinel.Bit(f.Width - 1 - k)
				pos := start + k
				mask := byte(0x80 >> (pos % 8))
				if bit == 1 {
					want[pos/8] |= mask
				} else {
					want[pos/8] &^= mask
				}
			}
			if !reflect.DeepEqual(buf, want) {
				t.Errorf("%s.Set%s(%#x) on 0x%02x: bytes\n got  % x\n want % x", part.Name, f.Name, sentinel, background, buf, want)
			}
			got := get.Func.Call([]reflect.Value{view})[0]
			var gotInt *big.Int
			switch got.Kind() {
			case reflect.Array:
				b := make([]byte, got.Len())
				reflect.Copy(reflect.ValueOf(b), got)
				gotInt = new(big.Int).SetBytes(b)
			case reflect.Bool:
				gotInt = big.NewInt(0)
				if got.Bool() {
					gotInt.SetInt64(1)
				}
			default:
				gotInt = new(big.Int).SetUint64(got.Uint())
			}
			if gotInt.Cmp(sentinel) != 0 {
				t.Errorf("%s.%s() = %#x after Set%s(%#x)", part.Name, f.Name, gotInt, f.Name, sentinel)
			}
		}
	}
}

// sentinels returns values of the given bit width. They are all ones,
// alternating bits, a single low bit and a single high bit.
func sentinels(width int) []*big.Int {
	one := big.NewInt(1)
	all := new(big.Int).Sub(new(big.Int).Lsh(one, uint(width)), one)
	alt := new(big.Int)
	for i := 0; i < width; i += 2 {
		alt.SetBit(alt, i, 1)
	}
	high := new(big.Int).Lsh(one, uint(width-1))
	return []*big.Int{all, alt, big.NewInt(1), high, new(big.Int)}
}

// The type table of spec section 3 agrees with HeaderLen and Known.
func TestSpecTypeTable(t *testing.T) {
	f, err := os.ReadFile("../docs/spec.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| (\\w+) \\| 0x([0-9A-F]{2}) \\| [^|]+ \\| ([0-9]+)")
	seen := map[Type]bool{}
	for _, m := range row.FindAllStringSubmatch(string(f), -1) {
		code, _ := strconv.ParseUint(m[2], 16, 8)
		hlen, _ := strconv.Atoi(m[3])
		ty := Type(code)
		seen[ty] = true
		if ty.String() != m[1] {
			t.Errorf("type 0x%02x: spec name %s, proto %s", code, m[1], ty)
		}
		got, err := HeaderLen(ty, 0)
		if err != nil || got != hlen {
			t.Errorf("%s: spec header %d bytes, proto %d (%v)", m[1], hlen, got, err)
		}
	}
	for c := 0; c < 256; c++ {
		if Type(c).Known() != seen[Type(c)] {
			t.Errorf("type 0x%02x: proto Known=%v, spec lists it: %v", c, Type(c).Known(), seen[Type(c)])
		}
	}
	if len(seen) != len(Types) {
		t.Errorf("spec lists %d types, proto.Types %d", len(seen), len(Types))
	}
}

// specTable returns the rows of the table that follows the marker
// <!-- name --> in docs/spec.md, each split into trimmed cells.
func specTable(t *testing.T, name string) [][]string {
	t.Helper()
	spec, err := os.ReadFile("../docs/spec.md")
	if err != nil {
		t.Fatal(err)
	}
	marker := "<!-- " + name + " -->"
	i := strings.Index(string(spec), marker)
	if i < 0 {
		t.Fatalf("docs/spec.md has no %s", marker)
	}
	var rows [][]string
	for _, line := range strings.Split(string(spec[i+len(marker):]), "\n")[1:] {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.Trim(strings.TrimSpace(cells[j]), "`")
		}
		if cells[0] == "Mask" || cells[0] == "Code" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		rows = append(rows, cells)
	}
	return rows
}

func parseNum(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("bad number %q in a spec table", s)
	}
	return v
}

func TestSpecFlagsTable(t *testing.T) {
	names := map[string]Flags{"AR": FlagAckRequest, "RT": FlagRetransmit, "SE": FlagSolicited, "reserved": FlagsReserved}
	var all Flags
	for _, row := range specTable(t, "flags") {
		mask := Flags(parseNum(t, row[0]))
		if names[row[1]] != mask {
			t.Errorf("flag %s: spec mask %#x, proto %#x", row[1], uint16(mask), uint16(names[row[1]]))
		}
		if all&mask != 0 {
			t.Errorf("flag %s overlaps another", row[1])
		}
		all |= mask
	}
	if all != 0xFFFF {
		t.Errorf("flag masks cover %#x, not every bit", uint16(all))
	}
}

func TestSpecCapabilitiesTable(t *testing.T) {
	var all uint64
	for _, row := range specTable(t, "capabilities") {
		mask := parseNum(t, row[0])
		if row[1] != "reserved" && Capabilities(mask).String() != row[1] {
			t.Errorf("capability %#x: spec %s, proto %s", mask, row[1], Capabilities(mask))
		}
		all |= mask
	}
	if all != 0xFFFFFFFF {
		t.Errorf("capability masks cover %#x", all)
	}
}

func TestSpecNackCodes(t *testing.T) {
	rows := specTable(t, "nack-codes")
	seen := map[NackCode]bool{}
	for _, row := range rows {
		code := NackCode(parseNum(t, row[0]))
		seen[code] = true
		if code.String() != row[1] {
			t.Errorf("NACK %#x: spec %s, proto %s", code, row[1], code)
		}
		if fatal := row[2] == "yes"; fatal != code.Fatal() {
			t.Errorf("NACK %s: spec fatal %q, proto Fatal() = %v", row[1], row[2], code.Fatal())
		}
	}
	for c := 0; c < 256; c++ {
		if strings.HasPrefix(NackCode(c).String(), "UNKNOWN") == seen[NackCode(c)] {
			t.Errorf("NACK %#x: named in proto %v, in spec %v", c, NackCode(c), seen[NackCode(c)])
		}
	}
}

func TestSpecCloseReasons(t *testing.T) {
	n := 0
	for _, row := range specTable(t, "close-reasons") {
		r := CloseReason(parseNum(t, row[0]))
		if r.String() != row[1] {
			t.Errorf("CLOSE reason %d: spec %s, proto %s", r, row[1], r)
		}
		n++
	}
	if got := CloseReason(n).String(); !strings.HasPrefix(got, "UNKNOWN") {
		t.Errorf("proto names CLOSE reason %d (%s) that the spec does not", n, got)
	}
}

// Every decode error Decode can return is named, as a drop cause, in the
// spec's validation order.
func TestSpecDecodeErrorNames(t *testing.T) {
	spec, err := os.ReadFile("../docs/spec.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(spec), "<!-- decode-errors -->")
	j := strings.Index(string(spec), "Steps 7 onward")
	if i < 0 || j < i {
		t.Fatal("spec section 9 markers missing")
	}
	steps := string(spec[i:j])
	for e := Error(1); int(e) < NumErrors; e++ {
		if e == ErrBufferSize {
			continue // Build's error, not a receiver's
		}
		if !strings.Contains(steps, "`"+e.Name()+"`") {
			t.Errorf("decode error %s is not named in spec section 9", e.Name())
		}
	}
}
