package envelope

import (
	"encoding/json"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// jsonValidCases are inputs where validators commonly part ways.
var jsonValidCases = []string{
	``, ` `, `0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `1e07`, `-01`,
	`"`, `""`, `"\u00e9"`, `"\u00G9"`, `"\x"`, `"\/"`, "\"\x01\"", "\"\xff\xfe\"", `"a"b`,
	`{}`, `{ }`, `{"a":1}`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{1:2}`, `{"a":1 "b":2}`,
	`[]`, `[1,]`, `[,1]`, `[1 2]`, `[[[]]]`, `[`, `]`, `true`, `tru`, `truex`, `null `,
	" \t\r\n[ 1 , \"x\" , { \"k\" : [ null ] } ]\n", `nul`, `NaN`, `Infinity`, `+1`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range jsonValidCases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%.40q) = %v, json.Valid says %v", c, got, want)
		}
	}
	// Inputs made of JSON's own pieces, so that most are nearly valid.
	pieces := []string{"{", "}", "[", "]", ",", ":", `"k"`, `"\u12ab"`, `"\`, "0", "-", "1", ".", "e", "+",
		"true", "null", " ", "\n", "\x1f", "\xc3\xa9"}
	rapid.Check(t, func(t *rapid.T) {
		var sb strings.Builder
		for _, i := range rapid.SliceOfN(rapid.IntRange(0, len(pieces)-1), 0, 24).Draw(t, "pieces") {
			sb.WriteString(pieces[i])
		}
		b := []byte(sb.String())
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

func FuzzValidJSON(f *testing.F) {
	for _, c := range jsonValidCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}
