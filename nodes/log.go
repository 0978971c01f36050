package nodes

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"unicode/utf8"
)

// Status names what the executor decided about a call. Every decision is
// logged with one of them in the "status" attribute.
type Status string

// The statuses.
const (
	StatusBlocked  Status = "blocked"   // the gate needs a human; the call did not run
	StatusApproved Status = "approved"  // a human's approval for this exact call was accepted
	StatusRejected Status = "rejected"  // a human rejected the call
	StatusExpired  Status = "expired"   // the approval request expired (a rejection)
	StatusCacheHit Status = "cache_hit" // a read answered from the memo (or by a concurrent identical read)
	StatusReplayed Status = "replayed"  // a write answered from the ledger: it already happened
	StatusExecuted Status = "executed"  // the tool ran and succeeded
	StatusRetry    Status = "retry"     // an attempt failed transiently; another follows
	StatusFailed   Status = "failed"    // the call failed (scope, arguments, tool error, ledger refusal)
	StatusFallback Status = "fallback"  // the fallback tool runs, or produced the result
)

// logMessage is the message of every decision event.
const logMessage = "tool decision"

// maxArgString bounds each string in the logged view of arguments.
const maxArgString = 128

// sensitiveKey reports whether an argument name suggests a credential; its
// value is never logged.
func sensitiveKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range [...]string{"password", "passwd", "secret", "token", "api_key", "apikey", "authorization", "credential", "private_key", "cookie"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// argsView is the logged form of a call's arguments: canonical JSON with
// known secret values and the values of credential-like keys redacted and
// long strings cut. It is computed only when a handler asks.
type argsView struct {
	args []byte
	red  *redactor
}

// LogValue implements slog.LogValuer.
func (v argsView) LogValue() slog.Value {
	dec := json.NewDecoder(bytes.NewReader(v.args))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return slog.StringValue("(unreadable arguments)")
	}
	b, err := json.Marshal(redactValue(x, v.red))
	if err != nil {
		return slog.StringValue("(unreadable arguments)")
	}
	return slog.StringValue(string(b))
}

// cutLong cuts s to maxArgString bytes (see cutAt).
func cutLong(s string) string { return cutAt(s, maxArgString) }

// cutAt cuts s to at most n bytes, at a rune boundary, marking the cut
// with "…".
func cutAt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func redactValue(x any, red *redactor) any {
	switch t := x.(type) {
	case string:
		return cutLong(red.String(t))
	case json.Number:
		if red.contains(t.String()) {
			return Redacted
		}
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = redactValue(e, red)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			if sensitiveKey(k) {
				out[cutLong(red.String(k))] = Redacted
				continue
			}
			out[cutLong(red.String(k))] = redactValue(e, red)
		}
		return out
	}
	return x
}

// event logs one decision.
func (e *Executor) event(ctx context.Context, level slog.Level, st Status, c *Call, args []byte, attrs ...slog.Attr) {
	if e.obs != nil {
		e.note(ctx, string(st), c, attrs)
	}
	if !e.log.Enabled(ctx, level) {
		return
	}
	base := []slog.Attr{
		slog.String("status", string(st)),
		slog.String("tool", cutLong(e.red.String(c.Tool))),
		slog.String("call_id", cutLong(e.red.String(c.ID))),
	}
	if c.Scope != "" {
		base = append(base, slog.String("thread", c.Scope))
	}
	if args != nil {
		base = append(base, slog.Any("args", argsView{args: args, red: e.red}))
	}
	if c.FallbackFor != "" {
		base = append(base, slog.String("fallback_for", c.FallbackFor))
	}
	e.log.LogAttrs(ctx, level, logMessage, append(base, attrs...)...)
}

// errAttr is the redacted text of err, cut at maxErrLog bytes.
func (e *Executor) errAttr(err error) slog.Attr {
	return slog.String("error", cutAt(e.red.String(err.Error()), maxErrLog))
}

// maxErrLog caps an error's text in a log record.
const maxErrLog = 4096
