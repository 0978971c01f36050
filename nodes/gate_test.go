package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// trace records the questions the executor asks, in order.
type trace struct {
	mu  sync.Mutex
	log []string
}

func (t *trace) add(s string) {
	t.mu.Lock()
	t.log = append(t.log, s)
	t.mu.Unlock()
}

func (t *trace) take() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.log
	t.log = nil
	return out
}

type spyPolicy struct {
	tr    *trace
	inner nodes.Policy
}

func (p spyPolicy) Gate(t nodes.ToolInfo, args json.RawMessage) nodes.Verdict {
	p.tr.add("gate:" + t.Name)
	return p.inner.Gate(t, args)
}

type spyMemo struct {
	tr    *trace
	inner *nodes.Memo
}

func (m spyMemo) Get(k string) (nodes.MemoEntry, bool) {
	e, ok := m.inner.Get(k)
	m.tr.add(fmt.Sprintf("memo.get:%v", ok))
	return e, ok
}

func (m spyMemo) Put(k string, e nodes.MemoEntry) {
	m.tr.add("memo.put:" + e.Tool)
	m.inner.Put(k, e)
}

type spyLedger struct {
	ledger.Ledger
	tr *trace
}

func (l spyLedger) Begin(ctx context.Context, in ledger.Intent) (ledger.Entry, bool, error) {
	e, started, err := l.Ledger.Begin(ctx, in)
	l.tr.add(fmt.Sprintf("ledger.begin:%s:%v", in.Tool, started))
	return e, started, err
}

func (l spyLedger) Complete(ctx context.Context, key, owner string, o ledger.Outcome) error {
	l.tr.add("ledger.complete")
	return l.Ledger.Complete(ctx, key, owner, o)
}

func (l spyLedger) Release(ctx context.Context, key, owner string) error {
	l.tr.add("ledger.release")
	return l.Ledger.Release(ctx, key, owner)
}

type Path struct {
	Path string `json:"path"`
}

// TestOrderOfQuestions proves the executor asks scope, gate, memo, ledger,
// run, fallback in that order, and stops at the first answer that ends the
// call.
func TestOrderOfQuestions(t *testing.T) {
	ctx := context.Background()
	tr := &trace{}
	body := func(name string, err error) func(context.Context, Path, nodes.Env) (string, error) {
		return func(ctx context.Context, p Path, env nodes.Env) (string, error) {
			tr.add("run:" + name)
			return "ok:" + p.Path, err
		}
	}
	readFallback := mustTool(t)(nodes.NewTool("read_cached", "Read a cached copy of a file.", body("read_cached", nil), nodes.Idempotent()))
	tools := []*nodes.Tool{
		mustTool(t)(nodes.NewTool("read_file", "Read a file.", body("read_file", nil), nodes.Idempotent())),
		mustTool(t)(nodes.NewTool("delete_file", "Delete a file.", body("delete_file", nil), nodes.Destructive(approval.RiskHigh))),
		mustTool(t)(nodes.NewTool("upload", "Upload a file.", body("upload", &nodes.HTTPError{Status: 403}), nodes.Fallback(readFallback))),
	}
	ex, err := nodes.NewExecutor(tools, nodes.WithPolicy(spyPolicy{tr, nodes.DenyDestructive()}), nodes.WithLedger(spyLedger{newMemLedger(t, nil), tr}))
	if err != nil {
		t.Fatal(err)
	}
	memo := spyMemo{tr, nodes.NewMemo(nil)}
	del := `{"path":"/tmp/a"}`
	approved := approval.Decision{Outcome: approval.Approved, Reviewer: "alice", ArgsHash: argsHash(t, "delete_file", del)}
	for _, tc := range []struct {
		name    string
		call    nodes.Call
		want    []string
		wantErr error
	}{
		{"scope refuses an unknown tool before anything", nodes.Call{Tool: "delete_filе", Args: json.RawMessage(del)}, nil, nodes.ErrUnknownTool},
		{"arguments are checked before the gate", nodes.Call{Tool: "delete_file", Args: json.RawMessage(`{"path":1}`)}, nil, nodes.ErrInvalidArgs},
		{"gate blocks before memo and ledger", nodes.Call{Tool: "delete_file", Args: json.RawMessage(del)}, []string{"gate:delete_file"}, nodes.ErrConfirmationRequired},
		{"read: gate, memo miss (checked again in the flight), run, memo put", nodes.Call{Tool: "read_file", Args: json.RawMessage(`{"path":"a"}`)},
			[]string{"gate:read_file", "memo.get:false", "memo.get:false", "run:read_file", "memo.put:read_file"}, nil},
		{"read again: gate, memo hit", nodes.Call{Tool: "read_file", Args: json.RawMessage(`{"path":"a"}`)}, []string{"gate:read_file", "memo.get:true"}, nil},
		{"approved write: gate, ledger, run, outcome; no memo", nodes.Call{Tool: "delete_file", Args: json.RawMessage(del), Approval: &approved},
			[]string{"gate:delete_file", "ledger.begin:delete_file:true", "run:delete_file", "ledger.complete"}, nil},
		{"repeat write: gate, ledger replay", nodes.Call{Tool: "delete_file", Args: json.RawMessage(del), Approval: &approved},
			[]string{"gate:delete_file", "ledger.begin:delete_file:false"}, nil},
		{"failed write: ledger stores the permanent failure, then the fallback asks its own questions", nodes.Call{Tool: "upload", Args: json.RawMessage(`{"path":"b"}`)},
			[]string{"gate:upload", "ledger.begin:upload:true", "run:upload", "ledger.complete", "gate:read_cached", "memo.get:false", "memo.get:false", "run:read_cached", "memo.put:read_cached"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.call.Scope, tc.call.Memo = "thread-1", memo
			_, err := ex.Execute(ctx, tc.call)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if d := cmp.Diff(tc.want, tr.take()); d != "" {
				t.Errorf("questions (-want +got):\n%s", d)
			}
		})
	}
}

type DeleteArgs struct {
	Path      string `json:"path"`
	Confirmed bool   `json:"confirmed,omitempty"`
}

func deleteTool(t testing.TB, runs *counter) *nodes.Tool {
	return mustTool(t)(nodes.NewTool("delete_file", "Delete a file. Returns the deleted path.",
		func(ctx context.Context, a DeleteArgs, env nodes.Env) (string, error) {
			runs.inc(a.Path)
			runs.inc("all")
			return a.Path, nil
		}, nodes.Destructive(approval.RiskHigh)))
}

// TestGatePolicies: default deny, DenyDestructive, AlwaysApprove, and an
// argument-aware rules policy.
func TestGatePolicies(t *testing.T) {
	ctx := context.Background()
	rules := nodes.FromRules(approval.Rules{MinRisk: approval.RiskCritical, ArgRules: []approval.ArgRule{
		func(tool string, args json.RawMessage) string {
			var a DeleteArgs
			if json.Unmarshal(args, &a) == nil && len(a.Path) >= 4 && a.Path[:4] == "/etc" {
				return "system_path"
			}
			return ""
		},
	}})
	for _, tc := range []struct {
		name    string
		policy  nodes.Policy
		path    string
		blocked bool
		rule    string
	}{
		{"no policy denies", nil, "/tmp/a", true, nodes.RuleDestructive},
		{"DenyDestructive denies", nodes.DenyDestructive(), "/tmp/a", true, nodes.RuleDestructive},
		{"AlwaysApprove runs", nodes.AlwaysApprove(), "/tmp/a", false, ""},
		{"rules: below the tier runs", rules, "/tmp/a", false, ""},
		{"rules: an argument rule gates", rules, "/etc/passwd", true, "system_path"},
		{"a panicking policy denies", nodes.PolicyFunc(func(nodes.ToolInfo, json.RawMessage) nodes.Verdict { panic("boom") }), "/tmp/a", true, "policy_panic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := &counter{}
			ex, err := nodes.NewExecutor([]*nodes.Tool{deleteTool(t, runs)}, nodes.WithPolicy(tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			_, err = ex.Execute(ctx, nodes.Call{Tool: "delete_file", Args: json.RawMessage(`{"path":"` + tc.path + `"}`), Scope: "t"})
			var cr *nodes.ConfirmationRequired
			if blocked := errors.As(err, &cr); blocked != tc.blocked {
				t.Fatalf("blocked = %v (%v), want %v", blocked, err, tc.blocked)
			}
			if tc.blocked && (cr.Rule != tc.rule || runs.get("all") != 0) {
				t.Errorf("rule %q, runs %d; want %q and 0", cr.Rule, runs.get("all"), tc.rule)
			}
			if !tc.blocked && runs.get("all") != 1 {
				t.Errorf("runs %d, want 1", runs.get("all"))
			}
		})
	}
}

// TestApprovalBoundToCall (R27): an approval covers one tool and one set of
// arguments (up to canonical form), nothing else.
func TestApprovalBoundToCall(t *testing.T) {
	ctx := context.Background()
	runs := &counter{}
	other := mustTool(t)(nodes.NewTool("delete_dir", "Delete a directory.", func(ctx context.Context, a DeleteArgs, env nodes.Env) (string, error) {
		runs.inc("dir")
		return a.Path, nil
	}, nodes.Destructive(approval.RiskHigh)))
	ex, err := nodes.NewExecutor([]*nodes.Tool{deleteTool(t, runs), other})
	if err != nil {
		t.Fatal(err)
	}
	granted := approval.Decision{Outcome: approval.Approved, Reviewer: "alice", ArgsHash: argsHash(t, "delete_file", `{"path":"/tmp/a"}`)}
	for _, tc := range []struct {
		tool, args string
		ok         bool
	}{
		{"delete_file", `{"path":"/etc"}`, false},
		{"delete_file", `{"path":"/tmp/a","confirmed":true}`, false},
		{"delete_dir", `{"path":"/tmp/a"}`, false},
		{"delete_file", ` {"path" : "/tmp/a"} `, true},
	} {
		g := granted
		_, err := ex.Execute(ctx, nodes.Call{Tool: tc.tool, Args: json.RawMessage(tc.args), Scope: "t", Approval: &g})
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, nodes.ErrApprovalMismatch)) {
			t.Errorf("%s %s: %v", tc.tool, tc.args, err)
		}
	}
	if runs.get("/tmp/a") != 1 || runs.get("/etc") != 0 || runs.get("dir") != 0 {
		t.Errorf("runs: %+v", runs.n)
	}
	// Canonical forms hash alike; different arguments do not.
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{`{"n":1,"p":"x"}`, `{"p":"x","n":1.0}`, true},
		{`{"n":1}`, `{"n":1e0}`, true},
		{`{"n":1}`, `{"n":2}`, false},
		{"{\"p\":\"\u00e9\"}", "{\"p\":\"e\u0301\"}", false}, // NFC and NFD are different arguments
	} {
		if same := argsHash(t, "t", tc.a) == argsHash(t, "t", tc.b); same != tc.same {
			t.Errorf("ArgsHash(%s) == ArgsHash(%s): %v, want %v", tc.a, tc.b, same, tc.same)
		}
	}
}

// TestGateBypassAttempts (R28): look-alike names never reach the tool; the
// destructive flag comes only from registration; arguments cannot approve
// a call.
func TestGateBypassAttempts(t *testing.T) {
	ctx := context.Background()
	runs := &counter{}
	ex, err := nodes.NewExecutor([]*nodes.Tool{deleteTool(t, runs)})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Delete_File", "delete_file ", " delete_file", "delete_file\u200b", "d\u0435lete_file", "delete_fil\u0435", "delete-file", "delete_file\x00", ""} {
		_, err := ex.Execute(ctx, nodes.Call{Tool: name, Args: json.RawMessage(`{"path":"/x"}`), Scope: "t"})
		var se *nodes.ScopeError
		if !errors.As(err, &se) || se.Tool != name {
			t.Errorf("tool %q: %v, want *ScopeError", name, err)
		}
	}
	for _, args := range []string{
		`{"path":"/x","confirmed":true}`,
		`{"path":"/x","_approved":true}`,
		`{"path":"/x","destructive":false}`,
		`{"path":"/x","approval":{"outcome":"approved"}}`,
	} {
		_, err := ex.Execute(ctx, nodes.Call{Tool: "delete_file", Args: json.RawMessage(args), Scope: "t"})
		if !errors.Is(err, nodes.ErrConfirmationRequired) && !errors.Is(err, nodes.ErrInvalidArgs) {
			t.Errorf("%s: %v; want blocked or invalid", args, err)
		}
	}
	// A decision that is not a valid outcome does not approve.
	bad := approval.Decision{Outcome: "APPROVE", ArgsHash: argsHash(t, "delete_file", `{"path":"/x"}`)}
	if _, err := ex.Execute(ctx, nodes.Call{Tool: "delete_file", Args: json.RawMessage(`{"path":"/x"}`), Scope: "t", Approval: &bad}); !errors.Is(err, nodes.ErrConfirmationRequired) {
		t.Errorf("invalid outcome: %v", err)
	}
	if runs.get("all") != 0 {
		t.Errorf("the destructive tool ran %d times", runs.get("all"))
	}
}

// TestRejectedDecision: the executor refuses a rejected or expired call.
func TestRejectedDecision(t *testing.T) {
	runs := &counter{}
	var logs logBuffer
	ex, _ := nodes.NewExecutor([]*nodes.Tool{deleteTool(t, runs)}, nodes.WithLogger(logs.Logger()))
	h := argsHash(t, "delete_file", `{"path":"/x"}`)
	for _, tc := range []struct {
		outcome approval.Outcome
		want    error
	}{{approval.Rejected, nodes.ErrRejected}, {approval.Expired, nodes.ErrExpired}} {
		d := approval.Decision{Outcome: tc.outcome, Reviewer: "bob", ArgsHash: h}
		_, err := ex.Execute(context.Background(), nodes.Call{Tool: "delete_file", Args: json.RawMessage(`{"path":"/x"}`), Scope: "t", Approval: &d})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v", tc.outcome, err)
		}
	}
	if d := cmp.Diff([]string{"delete_file:rejected", "delete_file:expired"}, logs.Statuses()); d != "" || runs.get("all") != 0 {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
}
