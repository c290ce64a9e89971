package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/queuey/queuey/sim"
	"go.yaml.in/yaml/v3"
)

// defaultScenarioYAML is the scenario queuey-sim runs with no command: the
// sizing workload of sim's BenchmarkSizingHour (see default.yaml).
//
//go:embed default.yaml
var defaultScenarioYAML []byte

// defaultScenario decodes the embedded default scenario.
func defaultScenario() (sim.Scenario, error) {
	s, err := decodeScenario(defaultScenarioYAML, false)
	if err != nil {
		return sim.Scenario{}, fmt.Errorf("the embedded default scenario: %w", err)
	}
	return s, nil
}

// loadScenarioFile reads a scenario file, YAML or JSON: a name ending in
// .json is JSON, anything else is read as YAML (of which JSON is a
// subset). Errors name the file and, where they can, the field.
func loadScenarioFile(path string) (sim.Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return sim.Scenario{}, fmt.Errorf("scenario file: %w", err)
	}
	isJSON := strings.EqualFold(filepath.Ext(path), ".json")
	s, err := decodeScenario(b, isJSON)
	if err != nil {
		return sim.Scenario{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// decodeScenario decodes a scenario, JSON if isJSON and YAML otherwise,
// and validates it. Both formats go the same way: into a generic value,
// checked against sim.Scenario's fields (so that an unknown field or a bad
// duration is reported with its path), then as JSON through sim.Load,
// whose strict decoding and validation apply to both.
func decodeScenario(b []byte, isJSON bool) (sim.Scenario, error) {
	var v any
	var err error
	if isJSON {
		v, err = decodeJSONValue(b)
	} else {
		v, err = decodeYAMLValue(b)
	}
	if err != nil {
		return sim.Scenario{}, err
	}
	if err := checkFields(v, reflect.TypeFor[sim.Scenario](), ""); err != nil {
		return sim.Scenario{}, describe(err)
	}
	if !isJSON {
		if b, err = json.Marshal(v); err != nil {
			return sim.Scenario{}, fmt.Errorf("converting YAML to JSON: %w", err)
		}
	}
	s, err := sim.Load(bytes.NewReader(b))
	if err != nil {
		return sim.Scenario{}, describe(err)
	}
	return s, nil
}

// decodeJSONValue decodes one JSON value, reporting a syntax error by line
// and column.
func decodeJSONValue(b []byte) (any, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			line, col := lineCol(b, se.Offset)
			return nil, &reworded{msg: fmt.Sprintf("line %d, column %d: %v", line, col, se), err: err}
		}
		return nil, err
	}
	return v, nil
}

// lineCol turns a byte offset (just past the fault, as json reports it)
// into a 1-based line and column.
func lineCol(b []byte, off int64) (line, col int) {
	off = min(max(off-1, 0), int64(len(b)))
	before := b[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// decodeYAMLValue decodes one YAML document into maps with string keys,
// slices and scalars, refusing a second document, non-string keys and
// non-finite numbers.
func decodeYAMLValue(b []byte) (any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty: want a scenario")
		}
		return nil, &reworded{msg: "YAML " + strings.TrimPrefix(err.Error(), "yaml: "), err: err}
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document: want one scenario")
	}
	return jsonable(v, "")
}

// jsonable converts what yaml decodes into interface values into what
// encoding/json can encode, with path naming the place in errors.
func jsonable(v any, path string) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c, err := jsonable(e, join(path, k))
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
		return x, nil
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%s: key %v is not a string", orTop(path), k)
			}
			c, err := jsonable(e, join(path, ks))
			if err != nil {
				return nil, err
			}
			m[ks] = c
		}
		return m, nil
	case []any:
		for i, e := range x {
			c, err := jsonable(e, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
		return x, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, fmt.Errorf("%s: %v is not a finite number", orTop(path), x)
		}
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	}
	return v, nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}

var durationType = reflect.TypeFor[sim.Duration]()

// checkFields walks a decoded value against the Go type it will be
// decoded into and reports, with its path, the first object key that type
// has no field for, the first value of the wrong kind, and the first
// duration that is not a Go duration string. Keys are visited in sorted
// order, so the error is the same every time. null is left to
// encoding/json, which ignores it.
func checkFields(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil
	}
	if t == durationType {
		s, ok := v.(string)
		if !ok {
			return kindError(path, `a duration string such as "30s"`, v)
		}
		if _, err := time.ParseDuration(s); err != nil {
			return &sim.FieldError{Field: orTop(path), Problem: fmt.Sprintf("bad duration %q: want a string such as \"30s\" or \"1h30m\"", s)}
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return kindError(path, "an object", v)
		}
		fields := jsonFields(t)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			ft, ok := fields[k]
			if !ok {
				return &sim.FieldError{Field: join(path, k), Problem: fmt.Sprintf("unknown field (%s takes %s)", orTop(path), strings.Join(slices.Sorted(maps.Keys(fields)), ", "))}
			}
			if err := checkFields(m[k], ft, join(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			return kindError(path, "a list", v)
		}
		for i, e := range s {
			if err := checkFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return kindError(path, "a string", v)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return kindError(path, "true or false", v)
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := number(v); !ok {
			return kindError(path, "a number", v)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if f, ok := number(v); !ok || f != math.Trunc(f) {
			return kindError(path, "an integer", v)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if f, ok := number(v); !ok || f != math.Trunc(f) || f < 0 {
			return kindError(path, "a non-negative integer", v)
		}
	}
	return nil
}

// number is v as a float64 if it is a number as JSON or YAML decode one.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}

func kindError(path, want string, got any) error {
	return &sim.FieldError{Field: orTop(path), Problem: fmt.Sprintf("want %s, got %s", want, describeValue(got))}
}

// jsonFields maps a struct's JSON field names to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

func describeValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("%q", x)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case bool:
		return fmt.Sprintf("%t", x)
	}
	if f, ok := number(v); ok {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return fmt.Sprintf("%v", v)
}

// describe rewords sim's scenario errors for the command line: a field
// error as "FIELD: PROBLEM", a JSON type mismatch by the field's path.
func describe(err error) error {
	if fe, ok := errors.AsType[*sim.FieldError](err); ok {
		return &reworded{msg: fe.Field + ": " + fe.Problem, err: err}
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
		return &reworded{msg: fmt.Sprintf("%s: want %s, got %s", te.Field, kindName(te.Type), te.Value), err: err}
	}
	msg := strings.TrimPrefix(err.Error(), "sim: scenario: ")
	return &reworded{msg: strings.TrimPrefix(msg, "json: "), err: err}
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}
