package nodes

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
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

// redactor replaces every known secret value, in its common encodings, with
// [REDACTED]. It only grows.
type redactor struct {
	mu     sync.RWMutex
	values map[string]bool
	rep    *strings.Replacer
	// spelled matches each value with any of its characters escaped the
	// way JSON (\u0041, \/, \") or a URL (%2f or %2F, + for a space) may
	// escape them, mixed freely: the text that decodes to the value.
	spelled *regexp.Regexp
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
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.values[v] = true
	set := map[string]bool{}
	for v := range r.values {
		js, _ := json.Marshal(v)
		b := []byte(v)
		h := hex.EncodeToString(b)
		for _, f := range []string{v, strings.ToUpper(v), strings.ToLower(v), string(js[1 : len(js)-1]), url.QueryEscape(v), url.PathEscape(v),
			base64.StdEncoding.EncodeToString(b), base64.URLEncoding.EncodeToString(b),
			base64.RawStdEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
			h, strings.ToUpper(h)} {
			set[f] = true
		}
		for _, f := range base64Inner(b) {
			set[f] = true
		}
	}
	forms := slices.Collect(maps.Keys(set))
	// Longest first, so that a form containing another is replaced whole
	// (then in order, so that the replacer is the same every time).
	slices.SortFunc(forms, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Redacted)
	}
	r.rep = strings.NewReplacer(pairs...)
	values := slices.Collect(maps.Keys(r.values))
	slices.SortFunc(values, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	alts := make([]string, len(values))
	for i, v := range values {
		alts[i] = spelledPattern(v)
	}
	r.spelled = regexp.MustCompile(strings.Join(alts, "|"))
	r.spelled.Longest()
}

// jsonShort are the two-character JSON escapes.
var jsonShort = map[rune]string{'"': `\"`, '\\': `\\`, '/': `\/`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}

// spelledPattern returns a regular expression that matches v with each
// character as is or escaped: JSON's \uXXXX (hex digits of either case,
// a surrogate pair beyond the BMP) and two-character escapes, URL
// percent-encoding of its UTF-8 bytes (either case), + for a space.
func spelledPattern(v string) string {
	var b strings.Builder
	for len(v) > 0 {
		c, n := utf8.DecodeRuneInString(v)
		raw := v[:n]
		v = v[n:]
		lit := regexp.QuoteMeta(raw)
		if c == utf8.RuneError && n == 1 {
			lit = `\x{fffd}` // the regexp package reads an invalid byte as U+FFFD
		}
		alts := []string{lit}
		var pct strings.Builder
		for _, x := range []byte(raw) {
			fmt.Fprintf(&pct, "%%(?i:%02x)", x)
		}
		alts = append(alts, pct.String())
		if c == ' ' {
			alts = append(alts, `\+`)
		}
		if e, ok := jsonShort[c]; ok {
			alts = append(alts, regexp.QuoteMeta(e))
		}
		if c == utf8.RuneError && n == 1 {
			// No JSON escape spells an invalid byte.
		} else if c < 0x10000 {
			alts = append(alts, fmt.Sprintf(`\\u(?i:%04x)`, c))
		} else if hi, lo := utf16.EncodeRune(c); hi != utf8.RuneError {
			alts = append(alts, fmt.Sprintf(`\\u(?i:%04x)\\u(?i:%04x)`, hi, lo))
		}
		b.WriteString("(?:" + strings.Join(alts, "|") + ")")
	}
	return b.String()
}

// minInner is the shortest inner base64 form (base64Inner) the redactor
// replaces: two groups, six bytes of the secret.
const minInner = 8

// base64Inner returns the base64 characters that spell v wherever it sits
// in a longer encoded text ("Basic " + base64("user:" + secret)): for each
// of the three alignments of v against the encoding's 3-byte groups, in
// both alphabets, the characters of the groups that lie wholly inside v.
// The characters of a group v shares with its neighbours depend on them,
// so up to two bytes' worth at each end stay visible. Forms shorter than
// minInner are left out: they would match ordinary text.
func base64Inner(v []byte) []string {
	var out []string
	for k := range 3 {
		buf := make([]byte, k+len(v))
		copy(buf[k:], v)
		first, end := (k+2)/3, (k+len(v))/3 // groups [first, end) lie inside v
		if 4*(end-first) < minInner {
			continue
		}
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			out = append(out, enc.EncodeToString(buf)[4*first:4*end])
		}
	}
	return out
}

// String redacts s.
func (r *redactor) String(s string) string {
	r.mu.RLock()
	rep, spelled := r.rep, r.spelled
	r.mu.RUnlock()
	if rep == nil {
		return s
	}
	return rep.Replace(spelled.ReplaceAllLiteralString(s, Redacted))
}

// Bytes redacts b, returning b itself when nothing changed.
func (r *redactor) Bytes(b []byte) []byte {
	r.mu.RLock()
	rep, spelled := r.rep, r.spelled
	r.mu.RUnlock()
	if rep == nil || b == nil {
		return b
	}
	s := rep.Replace(spelled.ReplaceAllLiteralString(string(b), Redacted))
	if s == string(b) {
		return b
	}
	return []byte(s)
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
	r.mu.RLock()
	rep := r.rep
	r.mu.RUnlock()
	if rep == nil || b == nil {
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

// contains reports whether s holds a known secret value.
func (r *redactor) contains(s string) bool { return r.String(s) != s }

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
