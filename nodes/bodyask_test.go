package nodes_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
)

// TestToolBodyInterruptRedacted (G11): a tool body that pauses the run
// with interrupt.Ask, interrupt.AskKey or a NodeInterrupt itself (not
// with nodes.Ask) saved its question with the credential in clear: in the
// run's result, the snapshot, the checkpoint's interrupt write and the
// SQLite file. The question is now redacted as nodes.Ask redacts it
// (value by value, so it stays JSON), in whatever spelling the body
// used, and the answer still reaches the body, matched by interrupt ID.
func TestToolBodyInterruptRedacted(t *testing.T) {
	var rb [16]byte
	if _, err := rand.Read(rb[:]); err != nil {
		t.Fatal(err)
	}
	canary := "sk_live_CANARY_" + hex.EncodeToString(rb[:])
	forms := canaryForms(canary)
	var escaped strings.Builder // every byte of the canary as a JSON \u escape
	for _, c := range []byte(canary) {
		fmt.Fprintf(&escaped, `\u%04x`, c)
	}
	inString, err := json.Marshal(map[string]string{"token": canary}) // JSON inside a JSON string
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		ask    func(ctx context.Context, tok string) (string, error)
		answer bool // the pause takes an answer (a NodeInterrupt takes none)
	}{
		{"Ask", func(ctx context.Context, tok string) (string, error) {
			return interrupt.Ask[string](ctx, "open https://bank.example/?token="+tok+" ?")
		}, true},
		{"AskKey", func(ctx context.Context, tok string) (string, error) {
			return interrupt.AskKey[string](ctx, "confirm", map[string]any{"url": "https://bank.example/", "auth": "Bearer " + tok, tok: 1})
		}, true},
		{"Ask escaped JSON", func(ctx context.Context, tok string) (string, error) {
			return interrupt.Ask[string](ctx, json.RawMessage(`{"url":"https://bank.example/?token=`+escaped.String()+`"}`))
		}, true},
		{"AskKey JSON in a string", func(ctx context.Context, tok string) (string, error) {
			return interrupt.AskKey[string](ctx, "confirm", string(inString))
		}, true},
		{"NodeInterrupt", func(ctx context.Context, tok string) (string, error) {
			return "", fmt.Errorf("stopping: %w", &interrupt.NodeInterrupt{Value: map[string]string{"auth": "Bearer " + tok}})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			runs := 0
			ask := mustTool(t)(nodes.NewTool("confirm_link", "Ask the user to confirm the link.",
				func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
					runs++
					tok, err := env.Secret("TOKEN")
					if err != nil {
						return "", err
					}
					a, err := tc.ask(ctx, tok.Reveal())
					if err != nil {
						return "", err
					}
					return "answered " + a, nil
				}, nodes.Idempotent(), nodes.Secrets("TOKEN")))
			clk := newFakeClock()
			ex, err := nodes.NewExecutor([]*nodes.Tool{ask}, nodes.WithSecrets(nodes.StaticSecrets{"TOKEN": canary}),
				nodes.WithLedger(newMemLedger(t, clk.Now)), nodes.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			tn, err := nodes.ToolNode(ex, nodes.WithNodeClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			dbPath := filepath.Join(t.TempDir(), "agent.db")
			saver, err := sqlite.Open(dbPath, sqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer saver.Close()
			r := agentGraph(t, scriptedModel(answerThenDone(call("c", "confirm_link", `{}`))), tn, saver)
			res, err := r.Invoke(ctx, "th", userSays("open it"))
			if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
				t.Fatalf("Invoke = %s with %d interrupts, %v; want waiting on one", res.Status, len(res.Interrupts), err)
			}
			in := res.Interrupts[0]
			if !json.Valid(in.Value) || !strings.Contains(jsonText(in.Value), nodes.Redacted) {
				t.Errorf("the saved question is %s; want valid JSON with the token redacted", in.Value)
			}
			scan(t, "the run's interrupt", []byte(jsonText(in.Value)), forms)
			snap, err := r.GetState(ctx, "th")
			if err != nil {
				t.Fatal(err)
			}
			sb, err := json.Marshal(snap)
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Interrupts) != 1 || snap.Interrupts[0].ID != in.ID {
				t.Errorf("snapshot interrupts %+v, want %s", snap.Interrupts, in.ID)
			}
			scan(t, "the snapshot", []byte(jsonText(sb)), forms)
			scan(t, "the database rows", dumpRows(t, saver.DB()), forms)
			for _, f := range []string{dbPath, dbPath + "-wal"} {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				scan(t, filepath.Base(f), b, forms)
			}
			if !tc.answer {
				return
			}
			res, err = r.Resume(ctx, "th", graph.Command[nodes.AgentState]{ResumeByID: map[string]any{in.ID: "yes"}})
			if err != nil || res.Status != graph.StatusDone {
				t.Fatalf("Resume = %s, %v; want done", res.Status, err)
			}
			tm := toolMessages(res.Values.Messages)
			if len(tm) != 1 || string(observation(t, tm[0]).Result) != `"answered yes"` || runs != 2 {
				t.Errorf("tool messages %+v after %d runs; want the body run again with the answer", tm, runs)
			}
		})
	}
}

// jsonText is the text of a JSON document with its escapes decoded: every
// key and string, strings that hold JSON themselves decoded too, one a
// line (or b itself when it is not JSON).
func jsonText(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	var sb strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			sb.WriteString(x + "\n")
			if strings.ContainsAny(x, `{["`) && json.Valid([]byte(x)) {
				sb.WriteString(jsonText([]byte(x)))
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for k, e := range x {
				sb.WriteString(k + "\n")
				walk(e)
			}
		default:
			fmt.Fprintln(&sb, x)
		}
	}
	walk(v)
	return sb.String()
}

// dumpRows is every row of every table of db, each value as text and,
// when it is JSON, with its escapes decoded (jsonText).
func dumpRows(t *testing.T, db *sql.DB) []byte {
	t.Helper()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, table := range tables {
		rows, err := db.Query(`SELECT * FROM "` + table + `"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals := make([]sql.RawBytes, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				out.Write(v)
				out.WriteString("\n" + jsonText(v) + "\n")
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Contains(out.Bytes(), []byte("__interrupt__")) {
		t.Errorf("no interrupt write among the rows; the dump missed them:\n%s", out.Bytes())
	}
	return out.Bytes()
}

// recordingResumer is a Resumer that never has an answer and records
// what it is asked.
type recordingResumer struct {
	mu     sync.Mutex
	raised []json.RawMessage
}

func (r *recordingResumer) Answer(q json.RawMessage) (json.RawMessage, string, bool) {
	return r.AnswerKey("", q)
}

func (r *recordingResumer) AnswerKey(_ string, q json.RawMessage) (json.RawMessage, string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.raised = append(r.raised, q)
	return nil, "id", false
}

// TestReconcileInterruptRedacted (G11): a reconcile hook runs with the
// tool's secrets like the body; a question it raises with interrupt.AskKey,
// or the value of a NodeInterrupt it returns, is redacted before the
// runtime records it.
func TestReconcileInterruptRedacted(t *testing.T) {
	const secret = "sk_live_reconcile_0123456789"
	for _, tc := range []struct {
		name string
		hook func(ctx context.Context, tok string) error
	}{
		{"AskKey", func(ctx context.Context, tok string) error {
			_, err := interrupt.AskKey[bool](ctx, "done?", map[string]string{"auth": "Bearer " + tok})
			return err
		}},
		{"NodeInterrupt", func(ctx context.Context, tok string) error {
			return &interrupt.NodeInterrupt{Value: map[string]string{"auth": "Bearer " + tok}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			l := newMemLedger(t, clk.Now)
			p := &payments{}
			hook := nodes.Reconcile(func(ctx context.Context, a OrderArgs, env nodes.Env) (map[string]any, bool, error) {
				tok, err := env.Secret("TOKEN")
				if err != nil {
					return nil, false, err
				}
				return nil, false, tc.hook(ctx, tok.Reveal())
			})
			ex, err := nodes.NewExecutor([]*nodes.Tool{p.tool(t, hook, nodes.Secrets("TOKEN"))}, nodes.WithLedger(l),
				nodes.WithSecrets(nodes.StaticSecrets{"TOKEN": secret}), nodes.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			c := charge("O-1", 5, "th")
			abandon(t, l, c)
			clk.Advance(time.Hour)
			res := &recordingResumer{}
			_, err = ex.Execute(interrupt.NewContext(context.Background(), res), c)
			if !interrupt.Is(err) {
				t.Fatalf("Execute error %v, want the hook's pause", err)
			}
			var raised []json.RawMessage
			var ni *interrupt.NodeInterrupt
			if errors.As(err, &ni) {
				v, merr := interrupt.Marshal(ni.Value)
				if merr != nil {
					t.Fatal(merr)
				}
				raised = append(raised, v)
			}
			raised = append(raised, res.raised...)
			if len(raised) != 1 || strings.Contains(string(raised[0]), secret) || !strings.Contains(string(raised[0]), nodes.Redacted) || !json.Valid(raised[0]) {
				t.Errorf("raised %q; want one value, valid JSON, with the secret redacted", raised)
			}
		})
	}
}
