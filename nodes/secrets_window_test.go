package nodes_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// The redactor's promise, checked here from outside and independently of
// how it finds what it redacts: in each text it is given, no run of 8 or
// more bytes of a known secret stays readable, as is (any letter case), in
// hex, in base64 (at any alignment, either alphabet), or with JSON or URL
// escapes decoded.
const window = 8

// foldText is how the checker compares text: ASCII letters in lower case,
// a space as '+' (URL query text writes it so).
func foldText(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c == ' ':
			b[i] = '+'
		}
	}
	return string(b)
}

// unescapeOnce decodes s's JSON escapes (\u0041, a surrogate pair, \/ and
// the other two-character escapes) and URL escapes (%2F), one layer, left
// to right; what is not an escape (a lone surrogate) stays.
func unescapeOnce(s string) string {
	short := map[byte]string{'"': `"`, '\\': `\`, '/': `/`, 'b': "\b", 'f': "\f", 'n': "\n", 'r': "\r", 't': "\t"}
	u := func(at int) rune {
		if at+6 > len(s) || s[at] != '\\' || s[at+1] != 'u' {
			return -1
		}
		n, err := strconv.ParseUint(s[at+2:at+6], 16, 16)
		if err != nil || strings.ContainsAny(s[at+2:at+6], "+-") {
			return -1
		}
		return rune(n)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil && !strings.ContainsAny(s[i+1:i+3], "+-") {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		if s[i] == '\\' && i+1 < len(s) {
			if e, ok := short[s[i+1]]; ok {
				b.WriteString(e)
				i++
				continue
			}
			if r := u(i); r >= 0 {
				if !utf16.IsSurrogate(r) {
					b.WriteRune(r)
					i += 5
					continue
				}
				if p := utf16.DecodeRune(r, u(i+6)); p != utf8.RuneError {
					b.WriteRune(p)
					i += 11
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// windowSpellings returns, folded, every spelling of every run of window
// bytes of secret that the redactor promises to hide; of a secret shorter
// than window, every spelling of the whole secret (in base64 inside a
// longer text, where at least 8 characters are its own).
func windowSpellings(secret string) []string {
	w := min(window, len(secret))
	var out []string
	for _, v := range []string{secret, strings.ToUpper(secret), strings.ToLower(secret), strings.ToValidUTF8(secret, "\uFFFD")} {
		for i := 0; i+w <= len(v); i++ {
			out = append(out, foldText(v[i:i+w]))
		}
	}
	for i := 0; i+w <= len(secret); i++ {
		run := []byte(secret[i : i+w])
		out = append(out, hex.EncodeToString(run))
		// base64: the characters that the run's bits alone determine,
		// with the run at each alignment against the 3-byte groups.
		for k := range 3 {
			buf := append(make([]byte, k), run...)
			from, to := (8*k+5)/6, (8*k+8*w)/6
			if to-from < 8 {
				continue
			}
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				out = append(out, foldText(enc.EncodeToString(buf)[from:to]))
			}
		}
	}
	return out
}

// leakedWindow returns a spelling of a window of secret that is readable
// in text (raw or with its escapes decoded), or "" when none is. The
// redaction marker is taken out first, so that its letters never count
// as the secret's.
func leakedWindow(text, secret string) string {
	text = strings.ReplaceAll(text, nodes.Redacted, "\x00")
	spellings := windowSpellings(secret)
	for _, view := range []string{text, unescapeOnce(text)} {
		view = foldText(view)
		for _, s := range spellings {
			if strings.Contains(s, "\x00") {
				continue
			}
			if strings.Contains(view, s) {
				return s
			}
		}
	}
	return ""
}

// keptInOrder reports whether out is in with some parts replaced by the
// marker: every part of out between markers is in in, in order.
func keptInOrder(in, out string) bool {
	for _, part := range strings.Split(out, nodes.Redacted) {
		i := strings.Index(in, part)
		if i < 0 {
			return false
		}
		in = in[i+len(part):]
	}
	return true
}

const (
	canaryW = "sk_live_CANARY_9f86d081884c7d659a2feaa0c55ad015" // 47 bytes
	awsW    = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"        // 40, with '/' and '+'
	phrase  = "correct horse battery staple 42"                 // spaces
	uniW    = "pässwörd-Ünïcode-秘密-2024"                        // non-ASCII
)

func jsonEscapeAll(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 0x10000 {
			hi, lo := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, hi, lo)
			continue
		}
		fmt.Fprintf(&b, `\u%04X`, r)
	}
	return b.String()
}

func pctAll(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		fmt.Fprintf(&b, "%%%02x", c)
	}
	return b.String()
}

// b64At encodes the window w after k bytes of other data, the way a longer
// encoded text holds it.
func b64At(enc *base64.Encoding, k int, w string) string {
	return enc.EncodeToString(append(bytes.Repeat([]byte{'~'}, k), w...))
}

// TestRedactWindows: every run of 8 bytes or more of a secret is redacted,
// in every spelling the redactor knows, wherever it sits: alone, split
// across two lines, in the middle of ordinary text; shorter runs and the
// parts of a secret shorter than 8 bytes stay (documented). The text
// around a redaction is kept, and the JSON form of the text redacts
// alike and stays JSON.
func TestRedactWindows(t *testing.T) {
	for _, tc := range []struct {
		name, secret, text string
		kept               bool // nothing to redact: the text stays as it is
	}{
		{name: "the issue's case: 12 bytes on one line, the rest on the next", secret: canaryW, text: "auth: " + canaryW[:12] + "\nauth (cont.): " + canaryW[12:]},
		{name: "split in the middle across two lines", secret: canaryW, text: "token=" + canaryW[:23] + "\n" + canaryW[23:] + " rejected"},
		{name: "wrapped at 16 columns", secret: canaryW, text: canaryW[:16] + "\n" + canaryW[16:32] + "\n" + canaryW[32:]},
		{name: "a 12-byte window alone", secret: canaryW, text: "key ..." + canaryW[10:22] + "... rejected"},
		{name: "an 8-byte window", secret: canaryW, text: "key " + canaryW[20:28] + " rejected"},
		{name: "a 7-byte window stays", secret: canaryW, text: "key " + canaryW[20:27] + " rejected", kept: true},
		{name: "two 7-byte parts stay", secret: canaryW, text: canaryW[20:27] + " and " + canaryW[27:34], kept: true},
		{name: "window in upper case", secret: awsW, text: "KEY=" + strings.ToUpper(awsW[3:19])},
		{name: "window in lower case", secret: awsW, text: "key=" + strings.ToLower(awsW[20:32])},
		{name: "window in mixed case", secret: canaryW, text: "Sk_Live_CaNaRy seen"},
		{name: "window with every byte \\u escaped", secret: canaryW, text: `{"e":"` + jsonEscapeAll(canaryW[30:42]) + `"}`},
		{name: "window with \\/ escapes", secret: awsW, text: `{"e":"..` + strings.ReplaceAll(awsW[9:21], "/", `\/`) + `.."}`},
		{name: "window percent-encoded", secret: awsW, text: "GET /v1?k=" + url.QueryEscape(awsW[10:30]) + " 401"},
		{name: "window with every byte percent-encoded", secret: awsW, text: "GET /v1?k=" + pctAll(awsW[0:9]) + " 401"},
		{name: "window with + for a space", secret: phrase, text: "q=" + strings.ReplaceAll(phrase[3:17], " ", "+")},
		{name: "window mixing JSON and URL escapes", secret: awsW, text: `..K7MD` + `%45\u004eG+bPx..`},
		{name: "window of a non-ASCII secret, \\u escaped", secret: uniW, text: `"` + jsonEscapeAll(uniW[2:20]) + `"`},
		{name: "window of a non-ASCII secret, as is", secret: uniW, text: "pw " + uniW[10:]},
		{name: "window in hex", secret: canaryW, text: "hex " + hex.EncodeToString([]byte(canaryW[5:15]))},
		{name: "window in upper-case hex", secret: canaryW, text: "HEX " + strings.ToUpper(hex.EncodeToString([]byte(canaryW[30:40])))},
		{name: "15 hex digits stay", secret: canaryW, text: "hex " + hex.EncodeToString([]byte(canaryW[5:13]))[:15], kept: true},
		{name: "window in base64, aligned", secret: canaryW, text: "b64 " + b64At(base64.StdEncoding, 0, canaryW[4:14])},
		{name: "window in base64, one byte in", secret: canaryW, text: "b64 " + b64At(base64.StdEncoding, 1, canaryW[4:12])},
		{name: "window in base64, two bytes in", secret: awsW, text: "b64 " + b64At(base64.StdEncoding, 2, awsW[13:21])},
		{name: "window in base64url", secret: awsW, text: "b64 " + b64At(base64.RawURLEncoding, 1, awsW[10:30])},
		{name: "window in base64 with \\/ escapes", secret: awsW, text: `{"b":"` + strings.ReplaceAll(b64At(base64.StdEncoding, 0, awsW[12:40]), "/", `\/`) + `"}`},
		{name: "window in base64, URL-escaped", secret: awsW, text: "?b=" + url.QueryEscape(b64At(base64.StdEncoding, 2, awsW[0:20]))},
		{name: "HTTP Basic credentials holding a window", secret: canaryW, text: "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("svc:"+canaryW[:20]))},
		{name: "7 bytes in base64 stay", secret: canaryW, text: "b64 " + b64At(base64.RawStdEncoding, 0, canaryW[4:11]), kept: true},
		{name: "4-byte secret whole", secret: "a1Z9", text: "pin a1Z9 rejected"},
		{name: "4-byte secret in upper case", secret: "a1Z9", text: "pin A1Z9 rejected"},
		{name: "6-byte secret in base64", secret: "Qm9#x!", text: "b64 " + base64.StdEncoding.EncodeToString([]byte("Qm9#x!"))},
		{name: "7-byte secret in hex", secret: "Zx9#q2!", text: "hex " + hex.EncodeToString([]byte("Zx9#q2!"))},
		{name: "7-byte secret \\u escaped", secret: "Zx9#q2!", text: jsonEscapeAll("Zx9#q2!")},
		{name: "7-byte secret split stays", secret: "Zx9#q2!", text: "Zx9#\nq2!", kept: true},
		{name: "8-byte secret whole", secret: "Zx9#q2!k", text: "key Zx9#q2!k"},
		{name: "8-byte secret's 7-byte part stays", secret: "Zx9#q2!k", text: "key Zx9#q2!", kept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := nodes.NewTestRedactor(tc.secret)
			got := r.String(tc.text)
			if tc.kept {
				if got != tc.text {
					t.Fatalf("String(%q) = %q; want it unchanged", tc.text, got)
				}
				return
			}
			if s := leakedWindow(got, tc.secret); s != "" {
				t.Errorf("String(%q) = %q: %q is readable", tc.text, got, s)
			}
			if !strings.Contains(got, nodes.Redacted) || !keptInOrder(tc.text, got) {
				t.Errorf("String(%q) = %q; want the text with the secret's spans replaced", tc.text, got)
			}
			if b := r.Bytes([]byte(tc.text)); string(b) != got {
				t.Errorf("Bytes = %q, String = %q", b, got)
			}
			doc, _ := json.Marshal(map[string]string{"text": tc.text, tc.text: "key"})
			red := r.JSON(doc)
			var back map[string]string
			if err := json.Unmarshal(red, &back); err != nil || len(back) != 2 {
				t.Fatalf("JSON(%s) = %s (%v); want JSON with both entries", doc, red, err)
			}
			for k, v := range back {
				for _, s := range []string{k, v} {
					if l := leakedWindow(s, tc.secret); l != "" {
						t.Errorf("JSON(%s) = %s: %q is readable", doc, red, l)
					}
				}
			}
		})
	}
}

// TestRedactWindowsKeepsOrdinaryText: text that shares fewer than 8
// consecutive bytes with a secret is left alone, even when it shares many
// shorter runs.
func TestRedactWindowsKeepsOrdinaryText(t *testing.T) {
	r := nodes.NewTestRedactor(canaryW, awsW, phrase)
	for _, s := range []string{
		"sk_live is the prefix of a live key",
		"the CANARY_ test ran; see 9f86d08 and a2feaa0",
		"correct,horse;battery,staple,42 times",
		"wJalrXU-tnFEMI-K7MDENG-bPxRfiC-YEXAMPL-EKEY",
		`{"id":"ord_123","note":"caf\u00e9 %C3%A9"}`,
	} {
		if got := r.String(s); got != s {
			t.Errorf("String(%q) = %q; want it unchanged", s, got)
		}
	}
}

// randomCanary returns a fresh credential of 47 bytes.
func randomCanary(t *testing.T) string {
	t.Helper()
	var rb [16]byte
	if _, err := rand.Read(rb[:]); err != nil {
		t.Fatal(err)
	}
	return "sk_live_CANARY_" + hex.EncodeToString(rb[:])
}

// noWindow fails t when a run of 8 or more bytes of secret is readable in
// data.
func noWindow(t *testing.T, where string, data []byte, secret string) {
	t.Helper()
	if s := leakedWindow(string(data), secret); s != "" {
		i := bytes.Index(bytes.ToLower(data), []byte(s))
		lo, hi := max(0, i-60), min(len(data), i+len(s)+60)
		if i < 0 {
			lo, hi = 0, min(len(data), 200)
		}
		t.Errorf("%s: %q of the secret is readable: …%s…", where, s, data[lo:hi])
	}
}

// TestSecretSplitAcrossLogLines (issue 16 item 10): a tool writes its
// credential in parts, one part in each attempt's error, so that each log
// record (a retry, then the failure) holds one part; or wraps it across
// the lines of one error. Every part of 8 bytes or more is redacted in
// every record, with the JSON and the text handler; a part of fewer bytes
// stays, and then the rest of the secret (the other side of the split) is
// redacted, so no more than 7 bytes of it are readable anywhere.
func TestSecretSplitAcrossLogLines(t *testing.T) {
	canary := randomCanary(t)
	chunks := func(s string, n int) []string {
		var out []string
		for len(s) > n {
			out = append(out, s[:n])
			s = s[n:]
		}
		return append(out, s)
	}
	for _, tc := range []struct {
		name   string
		errors []string // the error text of each attempt
	}{
		{"12 bytes, then the rest", []string{"upstream said: token=" + canary[:12], "upstream said: (cont.) " + canary[12:]}},
		{"halves", []string{"auth " + canary[:23] + " rejected", "auth …" + canary[23:]}},
		{"16-byte lines over three attempts", chunks(canary, 16)},
		{"wrapped across the lines of one error", []string{"401 Unauthorized\nkey: " + strings.Join(chunks(canary, 16), "\n     ")}},
		{"7 bytes, then the rest", []string{"token " + canary[:7], "token " + canary[7:]}},
		{"the rest, then 7 bytes", []string{"token " + canary[:40], "token " + canary[40:]}},
		{"percent-encoded halves", []string{"GET /v1?k=" + pctAll(canary[:20]), "GET /v1?k2=" + url.QueryEscape(canary[20:])}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var jsonLog, textLog bytes.Buffer
			handlers := []slog.Handler{
				slog.NewJSONHandler(&jsonLog, &slog.HandlerOptions{Level: slog.LevelDebug}),
				slog.NewTextHandler(&textLog, &slog.HandlerOptions{Level: slog.LevelDebug}),
			}
			attempts := 0
			tool := mustTool(t)(nodes.NewTool("call_api", "Call the partner API.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
				if _, err := env.Secret("KEY"); err != nil {
					return "", err
				}
				attempts++
				return "", &nodes.HTTPError{Status: 503, Err: errors.New(tc.errors[attempts-1])}
			}, nodes.Idempotent(), nodes.NoMemo(), nodes.Secrets("KEY"), nodes.Retry(upTo(len(tc.errors)))))
			ex, err := nodes.NewExecutor([]*nodes.Tool{tool}, nodes.WithSecrets(nodes.StaticSecrets{"KEY": canary}),
				nodes.WithClock(newFakeClock()), nodes.WithLogger(slog.New(fanout(handlers))))
			if err != nil {
				t.Fatal(err)
			}
			_, err = ex.Execute(context.Background(), nodes.Call{Tool: "call_api", Scope: "t"})
			if err == nil || attempts != len(tc.errors) {
				t.Fatalf("err %v after %d attempts; want a failure after %d", err, attempts, len(tc.errors))
			}
			noWindow(t, "the error", []byte(fmt.Sprintf("%v\n%+v", err, err)), canary)
			for name, log := range map[string]*bytes.Buffer{"JSON log": &jsonLog, "text log": &textLog} {
				lines := strings.Split(strings.TrimSpace(log.String()), "\n")
				if retries := strings.Count(log.String(), "status=retry") + strings.Count(log.String(), `"status":"retry"`); retries != len(tc.errors)-1 {
					t.Errorf("%s: %d retry records, want %d:\n%s", name, retries, len(tc.errors)-1, log)
				}
				for i, line := range lines {
					noWindow(t, fmt.Sprintf("%s record %d", name, i+1), []byte(line), canary)
				}
				noWindow(t, name, log.Bytes(), canary)
			}
		})
	}
}

// fanout is a slog.Handler that hands every record to each of hs.
type fanout []slog.Handler

func (f fanout) Enabled(ctx context.Context, l slog.Level) bool { return f[0].Enabled(ctx, l) }

func (f fanout) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range f {
		if err := h.Handle(ctx, r.Clone()); err != nil {
			return err
		}
	}
	return nil
}

func (f fanout) WithAttrs(as []slog.Attr) slog.Handler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithAttrs(as)
	}
	return out
}

func (f fanout) WithGroup(g string) slog.Handler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithGroup(g)
	}
	return out
}

type PromptArgs struct {
	Q string `json:"q"`
}

// TestSecretWindowsEverySink (issue 16 item 10, G11): tools write parts of
// their credential (each of 8 bytes or more, in several spellings) into
// every place lockstep writes text: errors across attempts and lines, a
// panic, results (so the memo, the ledger and the checkpoints), a write's
// permanent failure (the ledger's failure row), the reviewer context of an
// approval request, a body's question (an interrupt value, saved as a
// pending write). Afterwards no run of 8 bytes of it is readable in the
// logs, the errors, the final state, the snapshot, the approval request,
// the interrupt, the database rows, or the database and WAL files.
func TestSecretWindowsEverySink(t *testing.T) {
	ctx := context.Background()
	c := randomCanary(t)
	dbPath := filepath.Join(t.TempDir(), "agent.db")
	saver, err := sqlite.Open(dbPath, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer saver.Close()
	led, err := ledger.NewSQL(ctx, saver.DB(), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(env nodes.Env) string {
		s, err := env.Secret("API_KEY")
		if err != nil {
			t.Error(err)
		}
		return s.Reveal()
	}
	callAPI := mustTool(t)(nodes.NewTool("call_api", "Call the partner API.", func(ctx context.Context, a APIArgs, env nodes.Env) (map[string]string, error) {
		k := key(env)
		if env.Attempt == 1 {
			return nil, &nodes.HTTPError{Status: 503, Err: fmt.Errorf("GET https://api.example/v1%s?token=%s\n  (continued) %s: unavailable", a.Path, url.QueryEscape(k[:20]), k[20:])}
		}
		return map[string]string{
			"first":  "Bearer " + k[:20],
			"second": k[20:],
			"basic":  "Basic " + base64.StdEncoding.EncodeToString([]byte("svc:"+k[:24])),
			"hex":    hex.EncodeToString([]byte(k[10:30])),
			"loud":   strings.ToUpper(k[25:]),
		}, nil
	}, nodes.Secrets("API_KEY")))
	lookup := mustTool(t)(nodes.NewTool("lookup", "Look a record up.", func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
		k := key(env)
		return "record via " + hex.EncodeToString([]byte(k[5:25])) + " and " + jsonEscapeAll(k[25:]), nil
	}, nodes.Idempotent(), nodes.Secrets("API_KEY")))
	crashy := mustTool(t)(nodes.NewTool("crashy", "Crash.", func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
		k := key(env)
		panic("auth failed for key " + k[:16] + "\n… " + k[16:])
	}, nodes.Idempotent(), nodes.NoMemo(), nodes.Secrets("API_KEY")))
	refund := mustTool(t)(nodes.NewTool("refund", "Refund an order.", func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
		k := key(env)
		return "", nodes.Permanent(&nodes.HTTPError{Status: 403, Err: fmt.Errorf("key %s… (%s) may not refund", k[3:18], base64.RawURLEncoding.EncodeToString([]byte(k[18:40])))})
	}, nodes.Secrets("API_KEY")))
	payout := mustTool(t)(nodes.NewTool("payout", "Pay a partner.", func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
		return "paid with …" + key(env)[30:], nil
	}, nodes.Destructive(approval.RiskHigh), nodes.Secrets("API_KEY")))
	confirm := mustTool(t)(nodes.NewTool("confirm", "Ask the user.", func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
		k := key(env)
		ans, err := nodes.Ask[string](ctx, env, "open", map[string]string{"url": "https://bank.example/?t=" + k[:12], "then": k[12:]})
		if err != nil {
			return "", err
		}
		return "answered " + ans, nil
	}, nodes.Idempotent(), nodes.Secrets("API_KEY")))
	var logs logBuffer
	tools := []*nodes.Tool{callAPI, lookup, crashy, refund, payout, confirm}
	ex, err := nodes.NewExecutor(tools, nodes.WithSecrets(nodes.StaticSecrets{"API_KEY": c}), nodes.WithLedger(led),
		nodes.WithLogger(logs.Logger()), nodes.WithClock(newFakeClock()))
	if err != nil {
		t.Fatal(err)
	}
	tn, err := nodes.ToolNode(ex, nodes.WithReviewContext(func(ctx context.Context, call nodes.ToolCall, msgs []nodes.Message) (json.RawMessage, error) {
		// An application bug: the reviewer context quotes the credential, in parts.
		return json.Marshal(map[string]string{"auth": "Bearer " + c[:14] + "…", "rest": "…" + c[14:]})
	}))
	if err != nil {
		t.Fatal(err)
	}
	model := scriptedModel(turns(
		nodes.Message{Content: "Calling the partner.", ToolCalls: []nodes.ToolCall{
			call("a", "call_api", `{"path":"/orders"}`), call("b", "lookup", `{"path":"/r/1"}`),
			call("c", "crashy", `{"path":"/x"}`), call("d", "refund", `{"path":"/o/9"}`),
		}},
		nodes.Message{Content: "Paying.", ToolCalls: []nodes.ToolCall{call("e", "payout", `{"path":"/acme"}`)}},
		nodes.Message{Content: "Confirming.", ToolCalls: []nodes.ToolCall{call("f", "confirm", `{"path":"/ok"}`)}},
		nodes.Message{Content: "Done."},
	))
	g := graph.New[nodes.AgentState]().
		AddNode("model", model).AddNode("tools", tn).
		AddEdge(graph.START, "model").
		AddConditionalEdges("model", func(ctx context.Context, s nodes.AgentState) ([]string, error) {
			if len(nodes.LastToolCalls(s.Messages)) > 0 {
				return []string{"tools"}, nil
			}
			return []string{graph.END}, nil
		}, "tools", graph.END).
		AddEdge("tools", "model")
	r, err := g.Compile(graph.WithSaver(saver), graph.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, "th", userSays("pay acme"))
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("Invoke = %s with %d interrupts, %v; want waiting for the payout's approval", res.Status, len(res.Interrupts), err)
	}
	req, _, err := approval.ParseRequest(res.Interrupts[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	reqJSON, _ := json.Marshal(req)
	res, err = r.Resume(ctx, "th", graph.Command[nodes.AgentState]{Resume: approve(res.Interrupts[0].ID, req)})
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("Resume = %s with %d interrupts, %v; want waiting for the question", res.Status, len(res.Interrupts), err)
	}
	question := res.Interrupts[0]
	snap, err := r.GetState(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	snapJSON, _ := json.Marshal(snap)
	res, err = r.Resume(ctx, "th", graph.Command[nodes.AgentState]{ResumeByID: map[string]any{question.ID: "yes"}})
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("Resume = %s, %v; want done", res.Status, err)
	}
	// The errors a caller sees directly, from an executor that does not
	// retry.
	var errs []string
	direct, _ := nodes.NewExecutor(tools, nodes.WithSecrets(nodes.StaticSecrets{"API_KEY": c}), nodes.WithClock(newFakeClock()))
	for _, name := range []string{"crashy", "call_api", "refund"} {
		_, err := direct.Execute(ctx, nodes.Call{Tool: name, Args: json.RawMessage(`{"path":"/y"}`), Scope: "direct"})
		if err == nil {
			t.Fatalf("%s did not fail", name)
		}
		errs = append(errs, fmt.Sprintf("%v\n%+v\n%#v", err, err, err.Error()))
		var pe *nodes.PanicError
		if errors.As(err, &pe) {
			errs = append(errs, pe.Value, string(pe.Stack))
		}
	}
	state, _ := json.Marshal(res.Values)
	for _, want := range []string{`"paid with …`, `answered yes`, nodes.Redacted} {
		if !strings.Contains(string(state), want) {
			t.Errorf("final state lacks %q; the scenario did not run as planned:\n%s", want, state)
		}
	}
	noWindow(t, "logs", []byte(logs.String()), c)
	noWindow(t, "errors", []byte(strings.Join(errs, "\n")), c)
	noWindow(t, "final state", state, c)
	noWindow(t, "snapshot", snapJSON, c)
	noWindow(t, "approval request", reqJSON, c)
	noWindow(t, "question (interrupt value)", question.Value, c)
	noWindow(t, "database rows", dumpRows(t, saver.DB()), c)
	for _, f := range []string{dbPath, dbPath + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		noWindow(t, filepath.Base(f), b, c)
	}
}

// FuzzRedactWindows: whatever the secret (8 bytes or more) and the text
// around it, a run of 8 bytes or more of it that a text holds in any
// spelling the redactor knows is gone from what String returns, which is
// the text with some parts replaced by the marker; JSON of the text stays
// JSON and redacts alike.
func FuzzRedactWindows(f *testing.F) {
	f.Add(canaryW, "auth: ", "\nnext line", uint8(0), uint8(4), uint8(0))
	f.Add(canaryW, "key=", "", uint8(12), uint8(40), uint8(1))
	f.Add(awsW, `{"e":"`, `"}`, uint8(9), uint8(3), uint8(4))
	f.Add(awsW, "?k=", "&x=1", uint8(2), uint8(20), uint8(5))
	f.Add(phrase, "q=", "", uint8(3), uint8(6), uint8(6))
	f.Add(uniW, `"`, `"`, uint8(2), uint8(10), uint8(3))
	f.Add(canaryW, "hex ", "", uint8(5), uint8(2), uint8(7))
	f.Add(canaryW, "Basic c3Zj", "==", uint8(0), uint8(30), uint8(9))
	f.Add(awsW, "b64 ", "", uint8(13), uint8(0), uint8(10))
	f.Add(awsW, `{"b":"`, `"}`, uint8(12), uint8(28), uint8(11))
	f.Add("pass%41word\\u0041xyz", "", "", uint8(0), uint8(9), uint8(0))
	f.Add("\xff\xfe\x00abcdefgh", "x", "y", uint8(0), uint8(3), uint8(3))
	f.Fuzz(func(t *testing.T, secret, pre, post string, from, extra, spelling uint8) {
		if len(secret) < window || len(secret) > 96 || len(strings.TrimSpace(secret)) < window || len(pre)+len(post) > 512 {
			return
		}
		i := int(from) % (len(secret) - window + 1)
		j := i + window + int(extra)%(len(secret)-i-window+1)
		run := secret[i:j]
		var spelled string
		switch spelling % 12 {
		case 0:
			spelled = run
		case 1:
			spelled = strings.ToUpper(run)
		case 2:
			spelled = strings.ToLower(run)
		case 3:
			spelled = jsonEscapeAll(run)
		case 4:
			spelled = strings.ReplaceAll(run, "/", `\/`)
		case 5:
			spelled = pctAll(run)
		case 6:
			spelled = url.QueryEscape(run)
		case 7:
			spelled = hex.EncodeToString([]byte(run))
		case 8:
			spelled = strings.ToUpper(hex.EncodeToString([]byte(run)))
		case 9:
			spelled = b64At(base64.StdEncoding, int(spelling/12)%3, run)
		case 10:
			spelled = b64At(base64.RawURLEncoding, int(spelling/12)%3, run)
		case 11:
			spelled = strings.ReplaceAll(b64At(base64.StdEncoding, int(spelling/12)%3, run), "/", `\/`)
		}
		text := pre + spelled + post
		r := nodes.NewTestRedactor(secret)
		got := r.String(text)
		if l := leakedWindow(got, secret); l != "" {
			t.Fatalf("secret %q, text %q: String = %q: %q is readable", secret, text, got, l)
		}
		if !keptInOrder(text, got) {
			t.Fatalf("secret %q: String(%q) = %q: not the text with parts replaced", secret, text, got)
		}
		if b := r.Bytes([]byte(text)); string(b) != got {
			t.Fatalf("Bytes = %q, String = %q", b, got)
		}
		doc, _ := json.Marshal(map[string]string{"k": text})
		red := r.JSON(doc)
		var back map[string]string
		if err := json.Unmarshal(red, &back); err != nil || len(back) != 1 {
			t.Fatalf("JSON(%s) = %s (%v); want JSON with one entry", doc, red, err)
		}
		for k, v := range back {
			for _, s := range []string{k, v} {
				if l := leakedWindow(s, secret); l != "" {
					t.Fatalf("secret %q: JSON(%s) = %s: %q is readable", secret, doc, red, l)
				}
			}
		}
	})
}

// TestSecretWindowInArgs: in strict mode, arguments that hold 8 bytes or
// more of a known secret are refused as the whole value is (the model
// should never have them); a shorter part passes, and a lenient executor
// passes both through, logging them redacted.
func TestSecretWindowInArgs(t *testing.T) {
	for _, tc := range []struct {
		name, h string
		refused bool
	}{
		{"whole", canaryW, true},
		{"12 bytes", "Bearer " + canaryW[8:20], true},
		{"8 bytes, percent-encoded", pctAll(canaryW[30:38]), true},
		{"7 bytes", "Bearer " + canaryW[8:15], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			fetch := mustTool(t)(nodes.NewTool("fetch", "Fetch a URL.", func(ctx context.Context, a HeaderArgs, env nodes.Env) (string, error) {
				return "ok", nil
			}, nodes.Idempotent(), nodes.NoMemo(), nodes.Secrets("API_KEY")))
			args, _ := json.Marshal(HeaderArgs{URL: "https://x", Header: map[string]string{"h": tc.h}})
			for _, strict := range []bool{true, false} {
				ex, err := nodes.NewExecutor([]*nodes.Tool{fetch}, nodes.WithSecrets(nodes.StaticSecrets{"API_KEY": canaryW}),
					nodes.WithStrictSecrets(strict), nodes.WithLogger(logs.Logger()))
				if err != nil {
					t.Fatal(err)
				}
				_, err = ex.Execute(context.Background(), nodes.Call{Tool: "fetch", Args: args, Scope: "t"})
				var sr *nodes.SecretReferenceError
				if refused := errors.As(err, &sr); refused != (strict && tc.refused) {
					t.Errorf("strict=%v: err %v, want refused=%v", strict, err, strict && tc.refused)
				} else if refused && sr.Path != "$.header.h" {
					t.Errorf("path %s, want $.header.h", sr.Path)
				}
			}
			noWindow(t, "logs", []byte(logs.String()), canaryW)
		})
	}
}
