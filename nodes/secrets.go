package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Redacted replaces secret values wherever lockstep shows text.
const Redacted = "[REDACTED]"

// Secret is a credential handed to a tool body. It prints, logs and
// encodes as [REDACTED]; only Reveal returns the value, for the API call
// that needs it.
type Secret struct{ value string }

// Reveal returns the credential's value.
func (s Secret) Reveal() string { return s.value }

// String returns [REDACTED].
func (s Secret) String() string { return Redacted }

// GoString returns [REDACTED].
func (s Secret) GoString() string { return Redacted }

// Format writes [REDACTED] for every verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(Redacted)) }

// LogValue implements slog.LogValuer: [REDACTED].
func (s Secret) LogValue() slog.Value { return slog.StringValue(Redacted) }

// MarshalJSON encodes "[REDACTED]". It never fails.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(Redacted) }

// SecretProvider supplies credentials by name at call time (a vault, the
// environment, a config file). It is called for each call of a tool that
// declared the name, and once for every declared name before the
// executor's first call (so that the redactor knows the values from the
// start); it must be safe for concurrent use.
type SecretProvider interface {
	// Secret returns the value of the secret name. An error fails the tool
	// call permanently (a *ToolError wrapping a *SecretError); the
	// provider's text is never shown, since it may quote the value.
	Secret(ctx context.Context, name string) (string, error)
}

// StaticSecrets is a SecretProvider over a fixed map (for tests and simple
// deployments).
type StaticSecrets map[string]string

// Secret returns the value of name, or an error when the map has none.
func (s StaticSecrets) Secret(_ context.Context, name string) (string, error) {
	v, ok := s[name]
	if !ok {
		return "", fmt.Errorf("no secret named %q", name)
	}
	return v, nil
}

// SecretFunc adapts a function to SecretProvider.
type SecretFunc func(ctx context.Context, name string) (string, error)

// Secret calls f and returns its value and error.
func (f SecretFunc) Secret(ctx context.Context, name string) (string, error) { return f(ctx, name) }

// Env is what the runtime hands a tool body besides its arguments.
type Env struct {
	// Thread is the thread (or Call.Scope) the call runs in.
	Thread string
	// CallID is the model's tool-call ID.
	CallID string
	// Attempt counts attempts of this call, from 1.
	Attempt int

	tool    string
	key     string
	secrets map[string]Secret
	red     *redactor // the executor's: what a body asks is redacted too
}

// IdempotencyKey returns the call's idempotency key: the same on every
// attempt and every repeat of the logical operation. Send it to the
// downstream API (an Idempotency-Key header) so that it dedupes too. It is
// "" for reads and when the executor has no ledger.
func (e Env) IdempotencyKey() string { return e.key }

// Secret returns the declared secret name. It returns a *SecretError for a
// name the tool did not declare.
func (e Env) Secret(name string) (Secret, error) {
	s, ok := e.secrets[name]
	if !ok {
		return Secret{}, &SecretError{Tool: e.tool, Name: name, Reason: "not declared with nodes.Secrets when the tool was registered"}
	}
	return s, nil
}

// minRedact is the shortest value the redactor replaces: shorter ones
// would shred ordinary text, so the executor refuses to hand them out.
const minRedact = 4

// redactor replaces every known secret value, in its common encodings and
// any run of at least minWindow of its bytes, with [REDACTED]. It only
// grows; readers never wait for a writer.
type redactor struct {
	mu     sync.RWMutex // guards values; add holds it to build m
	values map[string]bool
	m      atomic.Pointer[matcher] // nil until a value is known
}

func newRedactor() *redactor { return &redactor{values: map[string]bool{}} }

// add learns a secret value, and the value without surrounding white
// space (a secret read from a file often ends in a newline that the body
// trims before use).
func (r *redactor) add(v string) {
	if t := strings.TrimSpace(v); t != v {
		r.add(t)
	}
	if len(v) < minRedact {
		return
	}
	r.mu.RLock()
	known := r.values[v]
	r.mu.RUnlock()
	if known {
		return // the executor adds a tool's values on every call
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.values[v] {
		return
	}
	r.values[v] = true
	r.m.Store(newMatcher(slices.Sorted(maps.Keys(r.values))))
}

// String redacts s: it returns s with every span that spells a known
// secret, or a run of at least minWindow bytes of one, replaced by
// [REDACTED] (see matcher), and s itself when there is none.
func (r *redactor) String(s string) string {
	m := r.m.Load()
	if m == nil {
		return s
	}
	spans := find(m, s)
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	at := 0
	for _, sp := range spans {
		b.WriteString(s[at:sp.from])
		b.WriteString(Redacted)
		at = sp.to
	}
	b.WriteString(s[at:])
	return b.String()
}

// Bytes redacts b as String does, returning b itself when nothing changed.
func (r *redactor) Bytes(b []byte) []byte {
	m := r.m.Load()
	if m == nil || b == nil {
		return b
	}
	spans := find(m, b)
	if len(spans) == 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	at := 0
	for _, sp := range spans {
		out = append(out, b[at:sp.from]...)
		out = append(out, Redacted...)
		at = sp.to
	}
	return append(out, b[at:]...)
}

// JSON redacts the JSON document b value by value: every string, object
// key and number that holds a secret (in any spelling String knows, with
// the document's own escapes decoded first) is redacted, and the result
// is valid JSON again (a number becomes the string [REDACTED]; two keys
// that redact alike stay apart, the later ones suffixed #2, #3...). It
// returns b itself when nothing changed and b's bytes hold no secret
// either (they may where v does not: a member that a later one with the
// same key replaces), and what Bytes returns when b is not JSON.
func (r *redactor) JSON(b []byte) []byte {
	if r.m.Load() == nil || b == nil {
		return b
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return r.Bytes(b)
	}
	if _, err := dec.Token(); err != io.EOF {
		return r.Bytes(b)
	}
	v, changed := r.value(v)
	if !changed && bytes.Equal(r.Bytes(b), b) {
		return b
	}
	// Encoded again even when no value changed but the bytes hold a
	// secret: an object member that a later one with the same key
	// replaced is not in v, but it is in b.
	out, err := json.Marshal(v)
	if err != nil {
		return r.Bytes(b)
	}
	return out
}

// value redacts a decoded JSON value (see JSON).
func (r *redactor) value(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		s := r.String(x)
		return s, s != x
	case json.Number:
		if r.contains(x.String()) {
			return Redacted, true
		}
	case []any:
		changed := false
		for i, e := range x {
			var c bool
			x[i], c = r.value(e)
			changed = changed || c
		}
		return x, changed
	case map[string]any:
		keys := slices.Sorted(maps.Keys(x))
		out := make(map[string]any, len(x))
		changed := false
		for _, k := range keys {
			e, c := r.value(x[k])
			rk := r.String(k)
			if rk != k {
				c = true
				for i := 2; ; i++ {
					if _, taken := x[rk]; !taken {
						if _, taken := out[rk]; !taken {
							break
						}
					}
					rk = fmt.Sprintf("%s#%d", r.String(k), i)
				}
			}
			out[rk] = e
			changed = changed || c
		}
		return out, changed
	}
	return v, false
}

// contains reports whether s holds a known secret value, or a run of at
// least minWindow bytes of one, in any spelling String redacts.
func (r *redactor) contains(s string) bool {
	m := r.m.Load()
	return m != nil && len(find(m, s)) > 0
}

// secretTemplate matches template references to secrets: {{secrets.X}},
// {{ secret.x }}, ${{ secrets.X }}.
var secretTemplate = regexp.MustCompile(`(?i)\{\{\s*secrets?\s*\.`)

// looksLikeSecretRef reports whether s references a secret: a template, or
// $NAME, ${NAME}, %NAME% or env:NAME for a declared secret name (letter
// case ignored).
func looksLikeSecretRef(s string, names map[string]bool) bool {
	if secretTemplate.MatchString(s) {
		return true
	}
	if len(names) == 0 {
		return false
	}
	lower := strings.ToLower(s)
	for name := range names {
		for _, ref := range [...]string{"$" + name, "${" + name + "}", "%" + name + "%", "env:" + name} {
			i := strings.Index(lower, ref)
			if i < 0 {
				continue
			}
			end := i + len(ref)
			if end == len(lower) || !isIdent(lower[end]) || strings.HasSuffix(ref, "}") || strings.HasSuffix(ref, "%") {
				return true
			}
		}
	}
	return false
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

// findSecretRef walks decoded JSON and returns the path of the first string
// (key or value) that references a secret, or string or number that holds
// a known secret value.
func findSecretRef(v any, path string, names map[string]bool, red *redactor) (string, bool) {
	switch x := v.(type) {
	case string:
		if looksLikeSecretRef(x, names) || red.contains(x) {
			return path, true
		}
	case json.Number: // a credential of digits (a PIN, an account number)
		if red.contains(x.String()) {
			return path, true
		}
	case []any:
		for i, e := range x {
			if p, ok := findSecretRef(e, fmt.Sprintf("%s[%d]", path, i), names, red); ok {
				return p, true
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := path + "." + k
			if looksLikeSecretRef(k, names) || red.contains(k) {
				return p, true
			}
			if p, ok := findSecretRef(x[k], p, names, red); ok {
				return p, true
			}
		}
	}
	return "", false
}
