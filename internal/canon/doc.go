// Package canon turns JSON documents into one canonical byte form and
// hashes tuples without delimiter ambiguity. Tool-call memo keys,
// idempotency keys and approval argument hashes are built on it, so two
// spellings of the same arguments always meet and two different arguments
// never do.
//
// # Canonical form
//
//   - Objects: keys sorted by their UTF-8 bytes, no whitespace anywhere.
//   - Strings: the exact code points of the input, re-escaped the way
//     encoding/json escapes (without HTML escaping). No Unicode
//     normalisation: NFC and NFD spellings are different arguments.
//   - Numbers: exact decimal value, written without exponent when the
//     integer part has at most 21 digits and the value is not tiny, else as
//     d.ddddde±n; so 1, 1.0, 1e0 and 10e-1 all become 1, and -0 becomes 0.
//     No rounding through float64 happens, so large integers stay distinct.
//   - true, false and null as themselves.
//
// # Rejected input
//
// Syntax errors, trailing data, invalid UTF-8, the escape of a lone
// surrogate ("\ud800", which encoding/json would decode as U+FFFD, so
// that it would canonicalise and hash as "\ufffd"), an object with a
// duplicate key, an object with two keys that differ only in letter case (encoding/json
// would merge them into one struct field, an ambiguity an attacker can use),
// and nesting deeper than MaxDepth are *Error values matching ErrInvalid.
// Nothing is repaired or guessed: input is either canonicalised exactly or
// refused.
//
// # Concurrency
//
// The package holds no state; its functions are safe for concurrent use
// and never modify their arguments.
package canon
