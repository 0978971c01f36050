package nodes_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

func TestSecretPrintsRedacted(t *testing.T) {
	var got nodes.Secret
	ex, _ := nodes.NewExecutor([]*nodes.Tool{mustTool(t)(nodes.NewTool("use", "Use a secret.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
		s, err := env.Secret("TOKEN")
		got = s
		return "", err
	}, nodes.Idempotent(), nodes.Secrets("TOKEN")))}, nodes.WithSecrets(nodes.StaticSecrets{"TOKEN": "hunter2-secret"}))
	if _, err := ex.Execute(context.Background(), nodes.Call{Tool: "use", Scope: "t"}); err != nil {
		t.Fatal(err)
	}
	if got.Reveal() != "hunter2-secret" {
		t.Fatalf("Reveal = %q", got.Reveal())
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "secret", got)
	j, _ := json.Marshal(map[string]any{"s": got})
	for _, s := range []string{fmt.Sprint(got), fmt.Sprintf("%v %+v %#v %s %q %x", got, got, got, got, got, got), buf.String(), string(j)} {
		if strings.Contains(s, "hunter2") || !strings.Contains(s, nodes.Redacted) {
			t.Errorf("leak or no redaction: %s", s)
		}
	}
}

func TestSecretErrors(t *testing.T) {
	ctx := context.Background()
	undeclared := mustTool(t)(nodes.NewTool("sneaky", "Asks for an undeclared secret.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
		_, err := env.Secret("OTHER")
		return "", err
	}, nodes.Idempotent(), nodes.Secrets("TOKEN")))
	provider := nodes.SecretFunc(func(ctx context.Context, name string) (string, error) {
		if name == "TOKEN" {
			return "tok-123456", nil
		}
		return "", errors.New("vault said: value was sk-leaky-value")
	})
	needsMissing := mustTool(t)(nodes.NewTool("broken", "Needs a missing secret.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
		return "", nil
	}, nodes.Idempotent(), nodes.Secrets("MISSING")))
	ex, err := nodes.NewExecutor([]*nodes.Tool{undeclared, needsMissing}, nodes.WithSecrets(provider))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ex.Execute(ctx, nodes.Call{Tool: "sneaky", Scope: "t"})
	var se *nodes.SecretError
	if !errors.As(err, &se) || se.Name != "OTHER" {
		t.Errorf("undeclared secret: %v", err)
	}
	_, err = ex.Execute(ctx, nodes.Call{Tool: "broken", Scope: "t"})
	if !errors.Is(err, nodes.ErrSecret) || strings.Contains(fmt.Sprintf("%v %+v", err, err), "leaky") {
		t.Errorf("provider failure: %v", err)
	}
	if _, err := nodes.NewExecutor([]*nodes.Tool{needsMissing}); !errors.Is(err, nodes.ErrInvalidConfig) {
		t.Errorf("secrets without a provider: %v", err)
	}
}

type HeaderArgs struct {
	URL    string            `json:"url"`
	Header map[string]string `json:"header,omitempty"`
}

// TestSecretReferences (R46): model arguments that reference a secret are
// refused in strict mode; nothing is ever expanded.
func TestSecretReferences(t *testing.T) {
	var seen []string
	var mu sync.Mutex
	fetch := mustTool(t)(nodes.NewTool("fetch", "Fetch a URL.", func(ctx context.Context, a HeaderArgs, env nodes.Env) (string, error) {
		mu.Lock()
		seen = append(seen, a.Header["h"])
		mu.Unlock()
		return "ok", nil
	}, nodes.Idempotent(), nodes.NoMemo(), nodes.Secrets("API_KEY")))
	secrets := nodes.StaticSecrets{"API_KEY": "sk-real-value-123"}
	strict, _ := nodes.NewExecutor([]*nodes.Tool{fetch}, nodes.WithSecrets(secrets))
	lenient, _ := nodes.NewExecutor([]*nodes.Tool{fetch}, nodes.WithSecrets(secrets), nodes.WithStrictSecrets(false))
	args := func(h string) json.RawMessage {
		b, _ := json.Marshal(HeaderArgs{URL: "https://x", Header: map[string]string{"h": h}})
		return b
	}
	// Teach the redactor the value (a first legitimate call).
	if _, err := strict.Execute(context.Background(), nodes.Call{Tool: "fetch", Args: args("plain"), Scope: "t"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		h   string
		bad bool
	}{
		{"{{secrets.API_KEY}}", true},
		{"{{ secret.anything }}", true},
		{"Bearer ${{ secrets.OTHER }}", true},
		{"$API_KEY", true},
		{"${API_KEY}", true},
		{"Bearer $api_key", true},
		{"env:API_KEY", true},
		{"%API_KEY%", true},
		{"sk-real-value-123", true},
		{"$100 refund", false},
		{"API_KEY rotation is due", false},
		{"environment: prod", false},
		{"$API_KEYS_LIST", false},
	} {
		_, err := strict.Execute(context.Background(), nodes.Call{Tool: "fetch", Args: args(tc.h), Scope: "t"})
		var sr *nodes.SecretReferenceError
		if bad := errors.As(err, &sr); bad != tc.bad {
			t.Errorf("%q: %v, want refused=%v", tc.h, err, tc.bad)
		} else if bad && sr.Path != "$.header.h" {
			t.Errorf("%q: path %s", tc.h, sr.Path)
		}
		if _, err := lenient.Execute(context.Background(), nodes.Call{Tool: "fetch", Args: args(tc.h), Scope: "t"}); err != nil {
			t.Errorf("lenient %q: %v", tc.h, err)
		}
	}
	// The lenient executor passed every reference through literally.
	found := map[string]bool{}
	for _, s := range seen {
		found[s] = true
	}
	for _, ref := range []string{"{{secrets.API_KEY}}", "$API_KEY", "${API_KEY}", "env:API_KEY"} {
		if !found[ref] {
			t.Errorf("reference %q did not reach the lenient tool literally (expanded?)", ref)
		}
	}
}

// recordingSaver keeps the JSON of every request a saver receives.
type recordingSaver struct {
	checkpoint.Saver
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *recordingSaver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	s.record(req)
	return s.Saver.Put(ctx, req)
}

func (s *recordingSaver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	s.record(req)
	return s.Saver.PutWrites(ctx, req)
}

func (s *recordingSaver) record(v any) {
	b, _ := json.Marshal(v)
	s.mu.Lock()
	s.buf.Write(b)
	s.buf.WriteByte('\n')
	s.mu.Unlock()
}

func (s *recordingSaver) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.buf.Bytes())
}

// canaryForms lists the spellings of the canary a scanner looks for: raw,
// upper case, base64 (four alphabets), hex (both cases), URL-escaped,
// every 12-byte window, and every 12-character window of the part of
// base64("svc:" + canary) that only the canary's bytes determine (HTTP
// Basic authentication).
func canaryForms(c string) []string {
	b := []byte(c)
	forms := []string{c, strings.ToUpper(c), base64.StdEncoding.EncodeToString(b), base64.URLEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b), hex.EncodeToString(b),
		strings.ToUpper(hex.EncodeToString(b)), url.QueryEscape(c)}
	for i := 0; i+12 <= len(c); i++ {
		forms = append(forms, c[i:i+12])
	}
	// "svc:" is 4 bytes: the groups from the third on (bytes 6...) hold
	// canary bytes only, up to the last whole group.
	basic := base64.StdEncoding.EncodeToString([]byte("svc:" + c))
	inner := basic[8 : 4*((4+len(c))/3)]
	for i := 0; i+12 <= len(inner); i++ {
		forms = append(forms, inner[i:i+12])
	}
	return forms
}

func scan(t *testing.T, where string, data []byte, forms []string) {
	t.Helper()
	for _, f := range forms {
		if i := bytes.Index(data, []byte(f)); i >= 0 {
			lo, hi := max(0, i-60), min(len(data), i+len(f)+60)
			t.Errorf("canary form %q found in %s: …%s…", f, where, data[lo:hi])
			return
		}
	}
}

type APIArgs struct {
	Path string `json:"path"`
}

// TestSecretCanary (R45): a random canary credential is used by tools that
// echo it in errors, results and panics; afterwards no spelling of it is in
// the logs, error strings, tool results, memo, ledger rows (database and
// WAL bytes), checkpoints or approval requests. The tools did receive it.
func TestSecretCanary(t *testing.T) {
	ctx := context.Background()
	var rb [16]byte
	if _, err := rand.Read(rb[:]); err != nil {
		t.Fatal(err)
	}
	canary := "sk_live_CANARY_" + hex.EncodeToString(rb[:])
	forms := canaryForms(canary)
	var received sync.Map

	dir := t.TempDir()
	dbPath := filepath.Join(dir, "agent.db")
	db, err := sql.Open("sqlite3", "file:"+dbPath+"?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	led, err := ledger.NewSQL(ctx, db, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	token := func(env nodes.Env, tool string) string {
		s, err := env.Secret("API_KEY")
		if err != nil {
			t.Error(err)
		}
		received.Store(tool, s.Reveal() == canary)
		return s.Reveal()
	}
	callAPI := mustTool(t)(nodes.NewTool("call_api", "Call the partner API. Returns its answer.",
		func(ctx context.Context, a APIArgs, env nodes.Env) (map[string]string, error) {
			tok := token(env, "call_api")
			if env.Attempt == 1 {
				return nil, &nodes.HTTPError{Status: 503, Err: fmt.Errorf("GET https://user:%s@api.example/v1%s?token=%s: unavailable", tok, a.Path, url.QueryEscape(tok))}
			}
			return map[string]string{
				"echo":          "Bearer " + tok,
				"basic":         base64.StdEncoding.EncodeToString([]byte(tok)),
				"authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("svc:"+tok)),
				"shouted":       strings.ToUpper(tok),
				"hex":           fmt.Sprintf("%X", tok),
			}, nil
		}, nodes.Secrets("API_KEY")))
	lookup := mustTool(t)(nodes.NewTool("lookup", "Look a record up.",
		func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
			return "record for " + a.Path + " via " + hex.EncodeToString([]byte(token(env, "lookup"))), nil
		}, nodes.Idempotent(), nodes.Secrets("API_KEY")))
	crash := mustTool(t)(nodes.NewTool("crashy", "Crash.",
		func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
			panic("auth failed for key " + token(env, "crashy"))
		}, nodes.Idempotent(), nodes.NoMemo(), nodes.Secrets("API_KEY")))
	payout := mustTool(t)(nodes.NewTool("payout", "Pay a partner.",
		func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
			return "paid with " + token(env, "payout"), nil
		}, nodes.Destructive(approval.RiskHigh), nodes.Secrets("API_KEY")))
	var logs logBuffer
	ex, err := nodes.NewExecutor([]*nodes.Tool{callAPI, lookup, crash, payout},
		nodes.WithSecrets(nodes.StaticSecrets{"API_KEY": canary}), nodes.WithLedger(led), nodes.WithLogger(logs.Logger()), nodes.WithClock(newFakeClock()))
	if err != nil {
		t.Fatal(err)
	}
	tn, err := nodes.ToolNode(ex, nodes.WithReviewContext(func(ctx context.Context, c nodes.ToolCall, msgs []nodes.Message) (json.RawMessage, error) {
		// An application bug: the reviewer context quotes the credential.
		return json.Marshal(map[string]string{"partner": "acme", "auth": "Bearer " + canary})
	}))
	if err != nil {
		t.Fatal(err)
	}
	saver := &recordingSaver{Saver: checkpoint.NewMemorySaver(nil)}
	model := scriptedModel(turns(
		nodes.Message{Content: "Calling the partner.", ToolCalls: []nodes.ToolCall{
			call("a", "call_api", `{"path":"/orders"}`),
			call("b", "lookup", `{"path":"/r/1"}`),
			call("c", "crashy", `{"path":"/x"}`),
			call("d", "call_api", `{"path":"{{secrets.API_KEY}}"}`),
		}},
		nodes.Message{Content: "Paying.", ToolCalls: []nodes.ToolCall{call("e", "payout", `{"path":"/acme"}`)}},
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
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusWaiting {
		t.Fatalf("status %s", res.Status)
	}
	req, _, _ := approval.ParseRequest(res.Interrupts[0].Value)
	reqJSON, _ := json.Marshal(req)
	res, err = r.Resume(ctx, "th", graph.Command[nodes.AgentState]{Resume: approve(res.Interrupts[0].ID, req)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusDone {
		t.Fatalf("status %s", res.Status)
	}
	// The errors a caller sees directly.
	var errs []string
	for _, c := range []nodes.Call{
		{Tool: "crashy", Args: json.RawMessage(`{"path":"/y"}`), Scope: "direct"},
		{Tool: "call_api", Args: json.RawMessage(`{"path":"/z"}`), Scope: "direct"},
	} {
		ex2, _ := nodes.NewExecutor([]*nodes.Tool{callAPI, crash}, nodes.WithSecrets(nodes.StaticSecrets{"API_KEY": canary}), nodes.WithLedger(led), nodes.WithClock(newFakeClock()))
		c2 := c
		_, err := ex2.Execute(ctx, c2)
		if c.Tool == "crashy" && err == nil {
			t.Fatal("crashy did not fail")
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%v\n%+v\n%#v", err, err, err.Error()))
			var pe *nodes.PanicError
			if errors.As(err, &pe) {
				errs = append(errs, pe.Value, string(pe.Stack))
			}
		}
	}
	for tool := range map[string]bool{"call_api": true, "lookup": true, "crashy": true, "payout": true} {
		if ok, _ := received.Load(tool); ok != true {
			t.Errorf("tool %s did not receive the credential", tool)
		}
	}
	state, _ := json.Marshal(res.Values)
	dbBytes, _ := os.ReadFile(dbPath)
	walBytes, _ := os.ReadFile(dbPath + "-wal")
	var rows bytes.Buffer
	qr, err := db.QueryContext(ctx, `SELECT key, tool, args_hash, state, coalesce(result, ''), coalesce(failure, ''), owner FROM lockstep_ledger`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for qr.Next() {
		var a, b, c, d, e, f, g string
		if err := qr.Scan(&a, &b, &c, &d, &e, &f, &g); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&rows, a, b, c, d, e, f, g)
		n++
	}
	qr.Close()
	if n < 2 {
		t.Errorf("only %d ledger rows; the scenario did not run", n)
	}
	scan(t, "logs", []byte(logs.String()), forms)
	scan(t, "errors", []byte(strings.Join(errs, "\n")), forms)
	scan(t, "final state (messages and memo)", state, forms)
	scan(t, "checkpoints and pending writes", saver.bytes(), forms)
	scan(t, "approval request", reqJSON, forms)
	scan(t, "ledger rows", rows.Bytes(), forms)
	scan(t, "database file", dbBytes, forms)
	scan(t, "WAL file", walBytes, forms)
	db.Close()
	dbBytes, _ = os.ReadFile(dbPath)
	scan(t, "database file after close", dbBytes, forms)
	// And the scenario really did what it claims: redactions happened.
	for _, want := range []string{nodes.Redacted, "secret", "panicked"} {
		if !strings.Contains(string(state)+logs.String(), want) {
			t.Errorf("expected %q somewhere in the state or logs", want)
		}
	}
	if !strings.Contains(string(reqJSON), `Bearer [REDACTED]`) {
		t.Errorf("reviewer context not redacted: %s", reqJSON)
	}
}

// TestTrimmedSecretRedacted: a secret read from a file ends in a newline;
// a body that trims it and echoes the token in an error does not leak it.
func TestTrimmedSecretRedacted(t *testing.T) {
	use := mustTool(t)(nodes.NewTool("use", "Use a token.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
		s, err := env.Secret("TOKEN")
		if err != nil {
			return "", err
		}
		return "", nodes.Permanent(fmt.Errorf("invalid token %q", strings.TrimSpace(s.Reveal())))
	}, nodes.Idempotent(), nodes.Secrets("TOKEN")))
	ex, _ := nodes.NewExecutor([]*nodes.Tool{use}, nodes.WithSecrets(nodes.StaticSecrets{"TOKEN": "ghp_abcdef123456\n"}))
	_, err := ex.Execute(context.Background(), nodes.Call{Tool: "use", Scope: "t"})
	if err == nil || strings.Contains(err.Error(), "ghp_abcdef123456") || !strings.Contains(err.Error(), nodes.Redacted) {
		t.Errorf("error %v: want the trimmed token redacted", err)
	}
}

// TestLogCutsLongNames: a call with a 1 MiB argument key, tool name or call
// ID does not put 1 MiB into the log: keys, names and IDs are cut as
// string values are.
func TestLogCutsLongNames(t *testing.T) {
	var logs logBuffer
	echo := mustTool(t)(nodes.NewTool("echo", "Echo.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
		return "ok", nil
	}, nodes.Idempotent()))
	ex, _ := nodes.NewExecutor([]*nodes.Tool{echo}, nodes.WithLogger(logs.Logger()))
	huge := strings.Repeat("k", 1<<20)
	for _, c := range []nodes.Call{
		{Tool: "echo", Scope: "t", Args: json.RawMessage(`{"` + huge + `":1}`)},
		{Tool: huge, Scope: "t"},
		{Tool: "echo", Scope: "t", ID: huge},
	} {
		ex.Execute(context.Background(), c)
	}
	if n := len(logs.String()); n > 64<<10 {
		t.Errorf("%d bytes of log for three calls, want long names cut", n)
	}
}

// decodings returns s and what it decodes to as URL query or path text
// and as the inside of a JSON string: the spellings a reader (the model, a
// human) would see through.
func decodings(s string) []string {
	out := []string{s}
	if u, err := url.QueryUnescape(s); err == nil {
		out = append(out, u)
	}
	if u, err := url.PathUnescape(s); err == nil {
		out = append(out, u)
	}
	// JSON escapes, wherever they are (an error text may quote a JSON body).
	j := jsonEscape.ReplaceAllStringFunc(s, func(e string) string {
		if e[1] != 'u' {
			return e[1:]
		}
		n, _ := strconv.ParseUint(e[2:], 16, 16)
		return string(rune(n))
	})
	return append(out, j)
}

var jsonEscape = regexp.MustCompile(`\\(?:u[0-9a-fA-F]{4}|["\\/])`)

// jsonStrings returns every string, key and number of the JSON document b.
func jsonStrings(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out []string
	for {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		switch x := tok.(type) {
		case string:
			out = append(out, x)
		case json.Number:
			out = append(out, x.String())
		}
	}
}

// TestSecretSpellingsRedacted: a tool echoes its credential in spellings
// that decode to it (JSON \u and \/ escapes, as PHP's json_encode writes
// "/"; percent-encoding with %20 for a space, %2B for '+' and lower-case
// hex, as encodeURIComponent and other clients write it), in a result or
// an error text; or as a JSON number. Neither the result the model reads
// nor the error text decodes to the credential, and the result stays
// valid JSON with every entry (a checkpoint refuses duplicate keys).
func TestSecretSpellingsRedacted(t *testing.T) {
	const aws = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	uesc := func(s, format string) string {
		var b strings.Builder
		for _, r := range s {
			fmt.Fprintf(&b, format, r)
		}
		return b.String()
	}
	pct := func(s string, space, hexFmt string) string {
		var b strings.Builder
		for _, c := range []byte(s) {
			switch {
			case c == ' ':
				b.WriteString(space)
			case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
				b.WriteByte(c)
			default:
				fmt.Fprintf(&b, hexFmt, c)
			}
		}
		return b.String()
	}
	for _, tc := range []struct {
		name, secret string
		form         string // the spelling that must not be readable (default: secret)
		out          string // the raw JSON result, or
		err          string // the error text
		entries      int    // entries of the result object, when it must keep them
	}{
		{name: "result \\u escapes", secret: aws, out: `{"key":"` + uesc(aws, `\u%04x`) + `"}`},
		{name: "result \\U escapes upper hex", secret: aws, out: `{"key":"` + uesc(aws, `\u%04X`) + `"}`},
		{name: "result one char \\u escaped", secret: aws, out: `{"key":"id ` + strings.Replace(aws, "K", `\u004b`, 1) + ` ok"}`},
		{name: "result \\/ escapes", secret: aws, out: `{"key":"` + strings.ReplaceAll(aws, "/", `\/`) + `"}`},
		{name: "result key \\u escaped", secret: aws, out: `{"` + uesc(aws, `\u%04x`) + `":1}`},
		{name: "result base64 with \\/ escapes", secret: "tok_live_???_abc_~~~", form: base64.StdEncoding.EncodeToString([]byte("tok_live_???_abc_~~~")), out: `{"basic":"` + strings.ReplaceAll(base64.StdEncoding.EncodeToString([]byte("tok_live_???_abc_~~~")), "/", `\/`) + `"}`},
		{name: "result number", secret: "40404040", out: `{"pin":40404040,"amount":1404040409}`, entries: 2},
		{name: "result keys redact alike", secret: aws, out: `{"` + aws + `":1,"` + strings.ToUpper(aws) + `":2,"[REDACTED]":3}`, entries: 3},
		{name: "result escape before secret", secret: "nightly-token-77", out: `{"log":"run\nightly-token-77"}`},
		{name: "error %20 and %2B", secret: "pass phrase+42/x", err: "GET /v1?k=" + pct("pass phrase+42/x", "%20", "%%%02X") + ": 401"},
		{name: "error lower-case hex", secret: aws, err: "GET /v1?k=" + pct(aws, "+", "%%%02x") + ": 401"},
		{name: "error quotes a PHP JSON body", secret: aws, err: `401: {"error":"bad key ` + strings.ReplaceAll(aws, "/", `\/`) + `"}`},
		{name: "error quotes a \\u-escaped body", secret: aws, err: `401: {"error":"bad key ` + uesc(aws, `\u%04x`) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tool := mustTool(t)(nodes.NewTool("echo", "Echo.", func(ctx context.Context, _ Empty, env nodes.Env) (json.RawMessage, error) {
				if _, err := env.Secret("KEY"); err != nil {
					return nil, err
				}
				if tc.err != "" {
					return nil, nodes.Permanent(errors.New(tc.err))
				}
				return json.RawMessage(tc.out), nil
			}, nodes.Idempotent(), nodes.NoMemo(), nodes.Secrets("KEY")))
			ex, err := nodes.NewExecutor([]*nodes.Tool{tool}, nodes.WithSecrets(nodes.StaticSecrets{"KEY": tc.secret}))
			if err != nil {
				t.Fatal(err)
			}
			res, err := ex.Execute(context.Background(), nodes.Call{Tool: "echo", Scope: "t"})
			var seen []string
			if tc.err != "" {
				if err == nil {
					t.Fatal("no error")
				}
				seen = decodings(err.Error())
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if !json.Valid(res.Output) {
					t.Fatalf("result %s is not JSON", res.Output)
				}
				for _, s := range jsonStrings(t, res.Output) {
					seen = append(seen, decodings(s)...)
				}
				var m map[string]any
				if tc.entries > 0 && (json.Unmarshal(res.Output, &m) != nil || len(m) != tc.entries) {
					t.Errorf("result %s: want %d distinct entries", res.Output, tc.entries)
				}
			}
			form := tc.secret
			if tc.form != "" {
				form = tc.form
			}
			for _, s := range seen {
				if strings.Contains(s, form) {
					t.Errorf("the credential is readable in %q", s)
				}
			}
		})
	}
}

// TestSecretKnownBeforeFirstUse: the redactor must know every declared
// secret before the executor's first tool call runs: a fresh process (a
// restart that resumes a thread) first builds approval requests, logs
// and checks arguments, and no tool has fetched the secret yet then.
func TestSecretKnownBeforeFirstUse(t *testing.T) {
	const canary = "sk_live_FRESHPROCESS_0123456789"
	payoutTool := func(t *testing.T) *nodes.Tool {
		return mustTool(t)(nodes.NewTool("payout", "Pay a partner.", func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
			return "paid", nil
		}, nodes.Destructive(approval.RiskHigh), nodes.Secrets("API_KEY")))
	}
	t.Run("approval request of the first call", func(t *testing.T) {
		var logs logBuffer
		ex, err := nodes.NewExecutor([]*nodes.Tool{payoutTool(t)}, nodes.WithSecrets(nodes.StaticSecrets{"API_KEY": canary}), nodes.WithLogger(logs.Logger()))
		if err != nil {
			t.Fatal(err)
		}
		tn, err := nodes.ToolNode(ex, nodes.WithReviewContext(func(ctx context.Context, c nodes.ToolCall, msgs []nodes.Message) (json.RawMessage, error) {
			return json.Marshal(map[string]string{"auth": "Bearer " + canary}) // an application bug
		}))
		if err != nil {
			t.Fatal(err)
		}
		saver := &recordingSaver{Saver: checkpoint.NewMemorySaver(nil)}
		model := scriptedModel(turns(
			nodes.Message{Content: "Paying with key " + canary + ".", ToolCalls: []nodes.ToolCall{call("e", "payout", `{"path":"/acme"}`)}},
			nodes.Message{Content: "Done."},
		))
		g := graph.New[nodes.AgentState]().
			AddNode("model", model).AddNode("tools", tn).
			AddEdge(graph.START, "model").AddEdge("model", "tools").AddEdge("tools", graph.END)
		r, err := g.Compile(graph.WithSaver(saver), graph.WithLogger(logs.Logger()))
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Invoke(context.Background(), "th", userSays("pay acme"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
			t.Fatalf("status %s, %d interrupts", res.Status, len(res.Interrupts))
		}
		payload, _ := json.Marshal(res.Interrupts[0].Value)
		forms := canaryForms(canary)
		scan(t, "approval request", payload, forms)
		scan(t, "logs", []byte(logs.String()), forms)
		if !strings.Contains(string(payload), "Bearer "+nodes.Redacted) {
			t.Errorf("request %s: want the reviewer context redacted", payload)
		}
	})
	t.Run("secret value in the first call's arguments", func(t *testing.T) {
		var logs logBuffer
		ex, err := nodes.NewExecutor([]*nodes.Tool{payoutTool(t)}, nodes.WithSecrets(nodes.StaticSecrets{"API_KEY": canary}), nodes.WithLogger(logs.Logger()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = ex.Execute(context.Background(), nodes.Call{Tool: "payout", Scope: "t", Args: json.RawMessage(`{"path":"` + canary + `"}`)})
		var cr *nodes.ConfirmationRequired
		if errors.As(err, &cr) {
			scan(t, "confirmation request args", cr.CallArgs, canaryForms(canary))
		}
		if !errors.Is(err, nodes.ErrSecretReference) {
			t.Errorf("err %v, want ErrSecretReference", err)
		}
		scan(t, "logs", []byte(logs.String()), canaryForms(canary))
	})
}

type AccountArgs struct {
	Account int64 `json:"account"`
}

// TestNumericSecretInArgs: a credential of digits only (a PIN, an account
// number) that the model sends as a JSON number is refused in strict mode
// as a string is, and a lenient executor's log shows it redacted.
func TestNumericSecretInArgs(t *testing.T) {
	const pin = "4242424242"
	for _, strict := range []bool{true, false} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			var logs logBuffer
			tool := mustTool(t)(nodes.NewTool("charge", "Charge an account.", func(ctx context.Context, a AccountArgs, env nodes.Env) (string, error) {
				return "ok", nil
			}, nodes.Idempotent(), nodes.NoMemo(), nodes.Secrets("PIN")))
			ex, err := nodes.NewExecutor([]*nodes.Tool{tool}, nodes.WithSecrets(nodes.StaticSecrets{"PIN": pin}),
				nodes.WithStrictSecrets(strict), nodes.WithLogger(logs.Logger()))
			if err != nil {
				t.Fatal(err)
			}
			_, err = ex.Execute(context.Background(), nodes.Call{Tool: "charge", Scope: "t", Args: json.RawMessage(`{"account":` + pin + `}`)})
			if refused := errors.Is(err, nodes.ErrSecretReference); refused != strict {
				t.Errorf("err %v, want refused=%v", err, strict)
			}
			if strings.Contains(logs.String(), pin) {
				t.Errorf("the PIN is in the log: %s", logs.String())
			}
		})
	}
}

// TestShortSecretRefused: a value too short to redact (fewer than 4 bytes
// once trimmed, as a body that trims a file's newline uses it) would reach
// every error and result its tool echoes it in, unredacted. The executor
// refuses to hand it out: the call fails with a *SecretError (ErrSecret)
// that does not quote it, and the body never runs.
func TestShortSecretRefused(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		refused     bool
	}{
		{"empty", "", true},
		{"one byte", "7", true},
		{"three bytes", "a1Z", true},
		{"three bytes and a newline", "a1Z\n", true},
		{"two bytes padded to four", " q9 ", true},
		{"four bytes", "a1Z9", false},
		{"four bytes and a newline", "a1Z9\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			use := mustTool(t)(nodes.NewTool("use", "Use a PIN.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
				ran = true
				s, err := env.Secret("PIN")
				if err != nil {
					return "", err
				}
				return "", nodes.Permanent(fmt.Errorf("PIN %s rejected", strings.TrimSpace(s.Reveal())))
			}, nodes.Idempotent(), nodes.Secrets("PIN")))
			ex, err := nodes.NewExecutor([]*nodes.Tool{use}, nodes.WithSecrets(nodes.StaticSecrets{"PIN": tc.value}))
			if err != nil {
				t.Fatal(err)
			}
			_, err = ex.Execute(context.Background(), nodes.Call{Tool: "use", Scope: "t"})
			var se *nodes.SecretError
			if refused := errors.As(err, &se) && errors.Is(err, nodes.ErrSecret); refused != tc.refused {
				t.Fatalf("err %v, want refused=%v", err, tc.refused)
			}
			if tc.refused && ran {
				t.Error("the body ran with a secret that cannot be redacted")
			}
			if v := strings.TrimSpace(tc.value); v != "" && strings.Contains(err.Error(), "PIN "+v) {
				t.Errorf("error %q quotes the secret", err)
			}
		})
	}
}

// TestReviewContextErrorRedacted: the reviewer-context function's error
// fails the tool node, and the runtime saves and logs a failed node's
// error text: it quotes the credential (an application bug, as for the
// context itself in TestSecretCanary), so it is redacted too, and still
// matches the application's error.
func TestReviewContextErrorRedacted(t *testing.T) {
	const canary = "sk_live_REVIEWERR_9876543210"
	errVault := errors.New("vault")
	payout := mustTool(t)(nodes.NewTool("payout", "Pay a partner.", func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
		return "paid", nil
	}, nodes.Destructive(approval.RiskHigh), nodes.Secrets("API_KEY")))
	var logs logBuffer
	ex, err := nodes.NewExecutor([]*nodes.Tool{payout}, nodes.WithSecrets(nodes.StaticSecrets{"API_KEY": canary}), nodes.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	tn, err := nodes.ToolNode(ex, nodes.WithReviewContext(func(ctx context.Context, c nodes.ToolCall, msgs []nodes.Message) (json.RawMessage, error) {
		return nil, fmt.Errorf("%w: lookup with Bearer %s refused", errVault, canary)
	}))
	if err != nil {
		t.Fatal(err)
	}
	saver := &recordingSaver{Saver: checkpoint.NewMemorySaver(nil)}
	model := scriptedModel(turns(nodes.Message{Content: "Paying.", ToolCalls: []nodes.ToolCall{call("e", "payout", `{"path":"/acme"}`)}}))
	g := graph.New[nodes.AgentState]().
		AddNode("model", model).AddNode("tools", tn).
		AddEdge(graph.START, "model").AddEdge("model", "tools").AddEdge("tools", graph.END)
	r, err := g.Compile(graph.WithSaver(saver), graph.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Invoke(context.Background(), "th", userSays("pay acme"))
	if !errors.Is(err, errVault) {
		t.Fatalf("err %v, want the reviewer-context error", err)
	}
	forms := canaryForms(canary)
	scan(t, "error", []byte(err.Error()), forms)
	scan(t, "checkpoints and pending writes", saver.bytes(), forms)
	scan(t, "logs", []byte(logs.String()), forms)
}

// TestSecretInDuplicateKeyRedacted: encoding/json keeps the last of two
// members with one key, so a secret in an earlier one is not in the
// decoded value; it is in the bytes the result is saved and shown as, and
// must be redacted there too (the JSON must stay JSON).
func TestSecretInDuplicateKeyRedacted(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	for _, out := range []string{
		`{"token":"` + secret + `","token":"x"}`,
		`{"a":{"token":"` + secret + `","token":"x"},"b":"` + secret + `"}`,
		`[{"k":"\u0073k-live-0123456789abcdef","k":1}]`,
	} {
		tool := mustTool(t)(nodes.NewTool("echo", "Echo.", func(ctx context.Context, _ Empty, env nodes.Env) (json.RawMessage, error) {
			if _, err := env.Secret("KEY"); err != nil {
				return nil, err
			}
			return json.RawMessage(out), nil
		}, nodes.Idempotent(), nodes.NoMemo(), nodes.Secrets("KEY")))
		ex, err := nodes.NewExecutor([]*nodes.Tool{tool}, nodes.WithSecrets(nodes.StaticSecrets{"KEY": secret}))
		if err != nil {
			t.Fatal(err)
		}
		res, err := ex.Execute(context.Background(), nodes.Call{Tool: "echo", Scope: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(res.Output) {
			t.Errorf("result %s of %s is not JSON", res.Output, out)
		}
		for _, s := range decodings(string(res.Output)) {
			if strings.Contains(s, secret) {
				t.Errorf("result %s of %s: the credential is readable in %q", res.Output, out, s)
			}
		}
	}
}

// gatedSecrets is a SecretProvider whose "SLOW" secret waits for release
// (or the context), whose "DOWN" secret always fails, and which counts the
// requests for each name.
type gatedSecrets struct {
	release chan struct{}
	asked   sync.Map // name → *atomic.Int32
}

func (g *gatedSecrets) count(name string) int32 {
	v, _ := g.asked.LoadOrStore(name, new(atomic.Int32))
	return v.(*atomic.Int32).Load()
}

func (g *gatedSecrets) Secret(ctx context.Context, name string) (string, error) {
	v, _ := g.asked.LoadOrStore(name, new(atomic.Int32))
	v.(*atomic.Int32).Add(1)
	switch name {
	case "SLOW":
		select {
		case <-g.release:
			return "slow-secret-value-0001", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	case "DOWN":
		return "", errors.New("vault unavailable")
	}
	return "", fmt.Errorf("no secret %q", name)
}

// TestSecretProviderDoesNotGateOtherCalls: learning the declared secrets
// before the first call must not make every call wait for the provider. A
// call of a tool that needs no secret completes while another call waits
// on a slow provider, and a name the provider fails for is asked again
// only after a pause, not on every call. Before, learn held the executor's
// lock around the provider calls and asked for a failing name on every
// call of every tool.
func TestSecretProviderDoesNotGateOtherCalls(t *testing.T) {
	g := &gatedSecrets{release: make(chan struct{})}
	clock := newFakeClock()
	needy := mustTool(t)(nodes.NewTool("needy", "Uses the slow secret.", func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
		return "ok", nil
	}, nodes.Secrets("SLOW", "DOWN")))
	plain := mustTool(t)(nodes.NewTool("plain", "Needs no secret.", func(ctx context.Context, a APIArgs, env nodes.Env) (string, error) {
		return "plain ok", nil
	}))
	ex, err := nodes.NewExecutor([]*nodes.Tool{needy, plain}, nodes.WithSecrets(g), nodes.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := ex.Execute(ctx, nodes.Call{Tool: "plain", Scope: "s1", Args: json.RawMessage(`{"path":"/a"}`)})
		first <- err
	}()
	for g.count("SLOW") == 0 { // the first call is asking the provider
		time.Sleep(time.Millisecond)
	}
	res, err := ex.Execute(ctx, nodes.Call{Tool: "plain", Scope: "s2", Args: json.RawMessage(`{"path":"/b"}`)})
	if err != nil || ctx.Err() != nil {
		t.Fatalf("a second call while the provider is slow: %v %v (ctx %v)", res, err, ctx.Err())
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatalf("first call: %v", err)
	}
	downBefore := g.count("DOWN")
	for i := range 5 {
		if _, err := ex.Execute(ctx, nodes.Call{Tool: "plain", Scope: fmt.Sprint("s", 10+i), Args: json.RawMessage(`{"path":"/c"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := g.count("DOWN") - downBefore; got != 0 {
		t.Errorf("the failing name was asked %d more times within the pause, want 0", got)
	}
	clock.Advance(time.Minute)
	if _, err := ex.Execute(ctx, nodes.Call{Tool: "plain", Scope: "s20", Args: json.RawMessage(`{"path":"/d"}`)}); err != nil {
		t.Fatal(err)
	}
	if got := g.count("DOWN") - downBefore; got != 1 {
		t.Errorf("after the pause the failing name was asked %d times, want 1", got)
	}
	if got := g.count("SLOW"); got != 1 {
		t.Errorf("the slow name was asked %d times, want 1 (learned once)", got)
	}
}
