// Package strictjson refuses JSON that json.Marshal could not have written
// for a given Go type, before the lenient json.Unmarshal sees it.
//
// The state-graph runtime stores state values as the output of
// encoding/json's Marshal and reads them back with Unmarshal. Unmarshal
// silently accepts much that Marshal never writes: unknown and case-variant
// keys, duplicate keys (last one wins), null for an int or a struct (the
// field is left as it was), invalid UTF-8 and lone surrogates (replaced by
// U+FFFD), an array too long or too short for a Go array (truncated or
// zero-filled). A stored value whose checksum matches but whose JSON is of
// that kind is corrupt, and must be reported as such rather than decoded
// into a different or zero value. For compiles a Schema for a type once;
// Schema.Check then vets a document in a single pass over its bytes.
//
// # Refused
//
// Check returns an *Error, matching ErrInvalid, for:
//
//   - Syntax errors, empty input, trailing data after the value, and a
//     leading byte order mark (U+FEFF is not JSON whitespace).
//   - Nesting deeper than MaxDepth (encoding/json's own limit).
//   - Invalid UTF-8 anywhere in a string, object keys included; raw control
//     characters in strings; escaped lone surrogates (\ud800 not followed by
//     a low-surrogate escape, or a low surrogate on its own).
//   - Numbers outside the JSON grammar (leading zeros, '+', NaN, Infinity,
//     "1.", ".5").
//   - Duplicate keys in any object, at any depth, including inside values of
//     interface type or of types with their own UnmarshalJSON. Keys are
//     compared after unescaping, so "a" and "\u0061" are the same key.
//     json.Marshal itself can write a duplicate key, for a map whose
//     distinct keys encode alike (invalid UTF-8 keys all become U+FFFD,
//     two TextMarshaler keys may return the same text). Such a document
//     cannot decode to the map it came from, and it is refused too; so is a
//     MarshalJSON or json.RawMessage that writes invalid UTF-8, lone
//     surrogates or duplicate keys, which encoding/json passes through.
//   - For a struct: any key that is not exactly (case-sensitively) the JSON
//     name json.Marshal writes for one of the struct's fields, following
//     encoding/json's rules for exported fields, json tags ("-", "-,",
//     invalid tag names), and embedded structs with their dominance rules.
//     This is what stops injected keys such as {"__type":"os/exec.Cmd"}.
//   - null where json.Marshal never writes it: for booleans, numbers,
//     strings, structs and Go arrays.
//   - For a float32 or float64 (also with the ,string option): a number
//     that does not read back as itself, whose float json.Marshal writes
//     as another value: 9007199254740993 (a float64 reads it as
//     9007199254740992), 0.10000000000000001, 1e-400 (read as 0).
//     Other spellings of the same value (1.0 for 1, 1e2) pass. Numbers
//     for integers, json.Number, interfaces and types with their own
//     methods are not checked this way.
//   - A value of the wrong JSON kind: a struct or map that is not an object,
//     a slice or array that is not an array, a boolean, number or string
//     where the Go type wants another, a Go array [N]T with other than N
//     elements, a []byte that is not a padded standard base64 string.
//   - A field with the ,string option that is not a string (or null, for a
//     pointer field), or whose string does not hold what json.Marshal puts
//     there: true/false, a JSON number, or a JSON string.
//   - An integer-keyed map whose key is not written as json.Marshal writes
//     integers ("01", "+1", "-0", "1e3").
//   - Any value for a type json.Marshal cannot encode at all (channels,
//     functions, complex numbers, maps with unsupported key types), except
//     the null written for a nil pointer to one.
//
// # Left to encoding/json
//
// Check does not decode values. Whether a number fits its Go type (300 for
// an int8, 1.5 for an int, 1e400, too large for a float64), whether a string is
// acceptable to a type's UnmarshalText or UnmarshalJSON (a malformed time,
// for instance), and whether an embedded pointer to an unexported struct
// can be set, are left to json.Unmarshal, which reports those as errors.
// Types that implement json.Marshaler, json.Unmarshaler,
// encoding.TextMarshaler or encoding.TextUnmarshaler (with a value or a
// pointer receiver: time.Time, json.RawMessage, big.Int...) and interface
// types accept any well-formed JSON, including null, since their own
// methods decide; the syntax, UTF-8, surrogate and duplicate-key rules
// still apply inside them. Map keys are only checked for duplicates (and,
// for integer keys, for their spelling). A missing struct field is not
// refused: json.Marshal omits fields with omitempty or omitzero and nil
// embedded pointers, and a value stored before a field was added to its
// type must stay readable. Key order and whitespace are not checked.
//
// # Concurrency and state
//
// The package has no package-level state besides the ErrInvalid sentinel:
// no caches, no registries and no init function. A Schema is immutable once For returns, and Check may be called
// from any number of goroutines at once. Check makes a single pass over the
// bytes and, for the documents json.Marshal writes for ordinary state
// types, allocates nothing; it costs a small fraction of json.Unmarshal.
package strictjson
