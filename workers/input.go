package workers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"

	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/safe"
)

// storedInput is the JSON a queued input is stored as: each written
// field's value as json.Marshal writes it, by field name, and the fields
// written with Update.Overwrite.
type storedInput struct {
	Fields    map[string]json.RawMessage `json:"fields"`
	Overwrite []string                   `json:"overwrite,omitempty"`
}

// encodeInput encodes input for the queue. It returns an error wrapping
// ErrInvalidInput for a Goto or Send (input cannot route), a field S does
// not have, and a value that does not encode (its MarshalJSON failing or
// panicking).
func encodeInput[S any](input graph.Update[S]) (json.RawMessage, error) {
	if len(input.Gotos()) > 0 || len(input.Sends()) > 0 {
		return nil, fmt.Errorf("%w: input cannot Goto or Send; add edges from START", ErrInvalidInput)
	}
	val := input.Value()
	v := reflect.ValueOf(&val).Elem()
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: the state type %s is not a struct", ErrInvalidInput, v.Type())
	}
	in := storedInput{Fields: map[string]json.RawMessage{}, Overwrite: input.Overwrites()}
	for _, name := range input.Fields() {
		f, ok := v.Type().FieldByName(name)
		if !ok || !f.IsExported() {
			return nil, fmt.Errorf("%w: the state has no field %s", ErrInvalidInput, strconv.Quote(name))
		}
		fv := v.FieldByIndex(f.Index).Interface()
		var (
			b   []byte
			err error
		)
		if p := safe.Call(func() { b, err = json.Marshal(fv) }); p != nil {
			return nil, fmt.Errorf("%w: field %s: its JSON encoding panicked: %s", ErrInvalidInput, name, p)
		}
		if err != nil {
			text, _ := safe.Text(err)
			return nil, fmt.Errorf("%w: field %s: %s", ErrInvalidInput, name, text)
		}
		in.Fields[name] = b
	}
	return json.Marshal(in)
}

// decodeInput rebuilds the Update encodeInput encoded. It returns an error
// naming the field that does not decode into S (a state type that changed
// since the input was queued).
func decodeInput[S any](b json.RawMessage) (graph.Update[S], error) {
	var in storedInput
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return graph.Update[S]{}, fmt.Errorf("the queued input does not decode: %w", err)
	}
	var val S
	v := reflect.ValueOf(&val).Elem()
	if v.Kind() != reflect.Struct {
		return graph.Update[S]{}, fmt.Errorf("the state type %s is not a struct", v.Type())
	}
	names := make([]string, 0, len(in.Fields))
	for name := range in.Fields {
		names = append(names, name)
	}
	sort.Strings(names)
	var plain []string
	for _, name := range names {
		f, ok := v.Type().FieldByName(name)
		if !ok || !f.IsExported() {
			return graph.Update[S]{}, fmt.Errorf("the queued input writes field %s, which the state no longer has", strconv.Quote(name))
		}
		ptr := v.FieldByIndex(f.Index).Addr().Interface()
		var err error
		if p := safe.Call(func() { err = json.Unmarshal(in.Fields[name], ptr) }); p != nil {
			return graph.Update[S]{}, fmt.Errorf("field %s of the queued input: its JSON decoding panicked: %s", strconv.Quote(name), p)
		}
		if err != nil {
			text, _ := safe.Text(err)
			return graph.Update[S]{}, fmt.Errorf("field %s of the queued input does not decode: %s", strconv.Quote(name), text)
		}
		if !slices.Contains(in.Overwrite, name) {
			plain = append(plain, name)
		}
	}
	u := graph.Set(val, plain...)
	if len(in.Overwrite) > 0 {
		u = u.Overwrite(in.Overwrite...)
	}
	return u, nil
}
