// Package jsonschema derives JSON Schemas (a subset of draft 2020-12) from
// Go types and validates JSON documents against them. Tool arguments are
// described to the model with For and checked with Validate before a tool
// runs; approval edits are checked against the schema stored with the
// request, so a process without the tool's Go code can still validate them.
//
// # Derivation
//
// Structs become objects whose properties are the exported fields, named by
// their json tag; a field is required unless its json tag has omitempty or
// omitzero; additionalProperties is false. Tag `description:"..."`
// describes a field; tag `jsonschema:"..."` adds constraints, separated by
// commas: enum=a|b|c, minimum=N, maximum=N, minLength=N, maxLength=N,
// minItems=N, maxItems=N, pattern=REGEXP (the pattern may not contain a
// comma). Strings, bools, integers ("integer"), floats ("number"), slices
// and arrays ("array"), string-keyed maps ("object" with
// additionalProperties), pointers (the pointed-to type, optional),
// time.Time (string, format date-time) and json.RawMessage or any (no
// constraint) are supported; other kinds (channels, funcs, complex) are an
// error, so a tool cannot declare arguments the model cannot send.
//
// # Validation
//
// Validate rejects what canon rejects (duplicate keys, keys differing only
// in case, bad JSON, the escape of a lone surrogate), then checks type,
// required, additionalProperties, enum, bounds, lengths and patterns. A
// "number" must also be one the float it is decoded into holds as itself
// (float32 for a schema with float32's bounds, float64 otherwise):
// 9007199254740993 for a float64 would reach the tool as
// 9007199254740992, another value than the one validated, hashed and
// approved, and is refused. Failures are a *ValidationError whose
// Path names the offending field ("$.ticket_id") and which matches
// ErrInvalid. A schema that went through JSON (Schema.UnmarshalJSON)
// checks a document as the one it was written from did. An unknown type,
// or an additionalProperties that is neither a boolean nor a schema,
// refuses every document rather than passing it; keywords outside the
// subset above (oneOf, $ref...) are dropped when a schema is read and
// constrain nothing.
//
// # Concurrency
//
// Validate only reads its schema: one *Schema may be shared by goroutines
// that do not modify it. The package holds no other state.
package jsonschema
