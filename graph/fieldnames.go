package graph

import (
	"fmt"
	"reflect"
	"strings"
)

// jsonKey returns the key encoding/json gives a struct field: the name of
// its json tag, or "" when the tag names none (or is "-").
func jsonKey(sf reflect.StructField) string {
	name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// addAliases records, for every field whose json tag names a key other
// than its Go name, that key as a second name of the channel (see
// schema.lookup). A key that is another channel's name or key would make
// a name mean two channels: a *CompileError.
func (s *schema) addAliases(t reflect.Type) []error {
	var errs []error
	for i := range s.fields {
		f := &s.fields[i]
		key := jsonKey(t.Field(f.index))
		if key == "" || key == f.name {
			continue
		}
		if j, ok := s.byName[key]; ok {
			errs = append(errs, &CompileError{Problem: fmt.Sprintf("json key %q is also the name of field %s: a channel name would mean two fields", key, s.fields[j].name), Field: f.name})
			continue
		}
		if j, ok := s.byKey[key]; ok {
			errs = append(errs, &CompileError{Problem: fmt.Sprintf("json key %q is also the key of field %s", key, s.fields[j].name), Field: f.name})
			continue
		}
		if s.byKey == nil {
			s.byKey = map[string]int{}
		}
		s.byKey[key] = i
		f.key = key
	}
	return errs
}

// lookup finds the channel a caller named: by its Go field name (the name
// lockstep stores and shows) or by the key of its json tag, the name a
// LangGraph user knows the state key by. Stored data is read by the Go
// name only (byName).
func (s *schema) lookup(name string) (int, bool) {
	if i, ok := s.byName[name]; ok {
		return i, true
	}
	i, ok := s.byKey[name]
	return i, ok
}
