package golden_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/scripted"
)

// Golden checkpoint databases (docs/reliability.md R14).
//
// testdata/vN holds SQLite files written by lockstep at some point
// in its history, each with one thread paused mid-run, and next to each a
// NAME.want.json with what GetState must report before the thread resumes
// and the values and side-effect counts after. The graphs that wrote them
// are defined below; the generator (LOCKSTEP_GOLDEN_WRITE=1) and the test
// share them.

const (
	goldenDir      = "testdata/v1"
	goldenWriteEnv = "LOCKSTEP_GOLDEN_WRITE"
	// goldenMaxBytes bounds a golden file, so that the fixtures stay
	// reviewable and cheap to keep in the repository.
	goldenMaxBytes = 200 << 10
	goldenReviewer = "golden-reviewer"
)

// goldenEpoch is the one instant every clock of the golden graphs reads
// (checkpoint timestamps and IDs, leases, approval requests, decisions,
// the ledger), both when the files are written and when they are resumed:
// the files are then byte-for-byte stable apart from SQLite's own
// bookkeeping, and an approval request never expires under the test.
var goldenEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func goldenNow() time.Time { return goldenEpoch }

// goldenEffects counts side effects (node bodies, durable steps, tool
// bodies, model calls) in one process.
type goldenEffects struct {
	mu sync.Mutex
	n  map[string]int
}

// newGoldenEffects returns counters for names, all zero, so that a
// snapshot lists the effects that must not happen too.
func newGoldenEffects(names ...string) *goldenEffects {
	fx := &goldenEffects{n: map[string]int{}}
	for _, name := range names {
		fx.n[name] = 0
	}
	return fx
}

func (fx *goldenEffects) add(name string) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fx.n[name]++
}

func (fx *goldenEffects) snapshot() map[string]int {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	out := make(map[string]int, len(fx.n))
	for k, v := range fx.n {
		out[k] = v
	}
	return out
}

// goldenCompileOptions are the compile options of every golden graph:
// the fixed clock, seeded randomness for checkpoint IDs, and run IDs
// from a counter. runs names the process ("write" or "resume") so that
// a resumed run never reuses a run ID stored in the file.
func goldenCompileOptions(saver *sqlite.Saver, runs string) []graph.Option {
	var n atomic.Int64
	return []graph.Option{
		graph.WithSaver(saver),
		graph.WithClock(goldenNow),
		graph.WithRandom(rand.NewChaCha8([32]byte{'l', 'o', 'c', 'k', 's', 't', 'e', 'p', '-', 'g', 'o', 'l', 'd', 'e', 'n'})),
		graph.WithRunIDs(func() string { return fmt.Sprintf("golden-%s-run-%d", runs, n.Add(1)) }),
		graph.WithLogger(slog.New(slog.DiscardHandler)),
	}
}

func openGoldenSaver(path string) (*sqlite.Saver, error) {
	return sqlite.Open(path, sqlite.Config{Now: goldenNow})
}

// ---------------------------------------------------------------------
// interrupt.db: a chain intake → enrich → review → publish; review does a
// durable step, then asks (interrupt.Ask) whether to publish.

const goldenInterruptThread = "golden-interrupt-1"

type goldenDoc struct {
	Title   string
	Notes   []string          `lockstep:"append"`
	Tags    map[string]string `lockstep:"merge"`
	Verdict string
}

// goldenQuestion is the value of review's interrupt.
type goldenQuestion struct {
	Prompt string `json:"prompt"`
	Title  string `json:"title"`
	Notes  int    `json:"notes"`
}

func goldenInterruptGraph(fx *goldenEffects) *graph.Graph[goldenDoc] {
	return graph.New[goldenDoc]().
		AddNode("intake", func(ctx context.Context, s goldenDoc) (graph.Update[goldenDoc], error) {
			fx.add("intake")
			return graph.Set(goldenDoc{Notes: []string{"intake " + s.Title}, Tags: map[string]string{"source": "golden"}}, "Notes", "Tags"), nil
		}).
		AddNode("enrich", func(ctx context.Context, s goldenDoc) (graph.Update[goldenDoc], error) {
			fx.add("enrich")
			return graph.Set(goldenDoc{Notes: []string{"enrich"}, Tags: map[string]string{"lang": "en", "pages": "12"}}, "Notes", "Tags"), nil
		}).
		AddNode("review", func(ctx context.Context, s goldenDoc) (graph.Update[goldenDoc], error) {
			fx.add("review")
			ticket, err := graph.Durable(ctx, "reserve", func(ctx context.Context) (string, error) {
				fx.add("reserve")
				return "slot-7", nil
			})
			if err != nil {
				return graph.Update[goldenDoc]{}, err
			}
			ans, err := interrupt.Ask[string](ctx, goldenQuestion{Prompt: "publish?", Title: s.Title, Notes: len(s.Notes)})
			if err != nil {
				return graph.Update[goldenDoc]{}, err
			}
			return graph.Set(goldenDoc{
				Verdict: ans,
				Notes:   []string{"review " + ans + " in " + ticket},
				Tags:    map[string]string{"reviewed": "yes"},
			}, "Verdict", "Notes", "Tags"), nil
		}).
		AddNode("publish", func(ctx context.Context, s goldenDoc) (graph.Update[goldenDoc], error) {
			fx.add("publish")
			return graph.Set(goldenDoc{Notes: []string{"publish " + s.Verdict}, Tags: map[string]string{"published": s.Verdict}}, "Notes", "Tags"), nil
		}).
		AddEdge(graph.START, "intake").
		AddEdge("intake", "enrich").
		AddEdge("enrich", "review").
		AddEdge("review", "publish").
		AddEdge("publish", graph.END)
}

func openGoldenInterrupt(ctx context.Context, path, runs string) (goldenApp, error) {
	fx := newGoldenEffects("intake", "enrich", "review", "reserve", "publish")
	saver, err := openGoldenSaver(path)
	if err != nil {
		return nil, err
	}
	r, err := goldenInterruptGraph(fx).Compile(goldenCompileOptions(saver, runs)...)
	if err != nil {
		saver.Close()
		return nil, err
	}
	return &goldenGraphApp[goldenDoc]{
		saver: saver, r: r, fx: fx, thread: goldenInterruptThread,
		input: graph.Set(goldenDoc{Title: "Quarterly report"}, "Title"),
		resumeWith: func(ctx context.Context, r *graph.Runnable[goldenDoc], thread string) error {
			_, err := r.Resume(ctx, thread, graph.Command[goldenDoc]{Resume: "approved"})
			return err
		},
	}, nil
}

// ---------------------------------------------------------------------
// approval.db: the prebuilt agent (model ⇄ tools) with a read and a
// destructive, gated tool; the tool node, the SQL ledger and the SQL
// approval store share the saver's file, as in the examples.

const goldenApprovalThread = "golden-approval-1"

type goldenFileArgs struct {
	Path string `json:"path" jsonschema:"minLength=1"`
}

type goldenFileInfo struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

type goldenDeleted struct {
	Path    string `json:"path"`
	Deleted bool   `json:"deleted"`
}

// goldenApprovalRules gate every high-risk call for the ops team.
func goldenApprovalRules() approval.Rules {
	return approval.Rules{Owner: "ops", TTL: 48 * time.Hour}
}

func goldenApprovalScript() *scripted.Model {
	return scripted.New(
		scripted.CallTools("Let me look the file up.",
			scripted.Call("lookup-1", "lookup_file", `{"path":"/srv/old.log"}`)),
		scripted.CallTools("The file is stale; I ask to delete it.",
			scripted.Call("delete-1", "delete_file", `{"path":"/srv/old.log"}`)),
		scripted.Say("Done: /srv/old.log is deleted."),
	)
}

// goldenApprovalAgent builds the agent over the file's ledger and store.
func goldenApprovalAgent(fx *goldenEffects, led ledger.Ledger, store *approval.SQLStore) (*nodes.Agent[nodes.AgentState], error) {
	lookup, err := nodes.NewTool("lookup_file", "Look a file up.",
		func(ctx context.Context, a goldenFileArgs, _ nodes.Env) (goldenFileInfo, error) {
			fx.add("lookup_file")
			return goldenFileInfo{Path: a.Path, Bytes: 4096}, nil
		}, nodes.Idempotent())
	if err != nil {
		return nil, err
	}
	del, err := nodes.NewTool("delete_file", "Delete a file. Needs approval.",
		func(ctx context.Context, a goldenFileArgs, _ nodes.Env) (goldenDeleted, error) {
			fx.add("delete_file")
			return goldenDeleted{Path: a.Path, Deleted: true}, nil
		}, nodes.Destructive(approval.RiskHigh))
	if err != nil {
		return nil, err
	}
	var owners atomic.Int64
	ex, err := nodes.NewExecutor([]*nodes.Tool{lookup, del},
		nodes.WithPolicy(nodes.FromRules(goldenApprovalRules())),
		nodes.WithLedger(led),
		nodes.WithOwnerIDs(func() string { return fmt.Sprintf("golden-owner-%d", owners.Add(1)) }),
		nodes.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	script := goldenApprovalScript()
	model := nodes.ModelFunc(func(ctx context.Context, msgs []nodes.Message, tools []nodes.Definition) (nodes.Message, error) {
		fx.add("model")
		return script.Generate(ctx, msgs, tools)
	})
	return nodes.NewAgent(model, ex, nodes.AgentOptions{MaxTurns: 4, ToolNode: []nodes.ToolNodeOption{
		nodes.WithNodeClock(goldenNow), nodes.WithOutcomeRecorder(store),
	}})
}

func openGoldenApproval(ctx context.Context, path, runs string) (_ goldenApp, err error) {
	fx := newGoldenEffects("model", "lookup_file", "delete_file")
	saver, err := openGoldenSaver(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			saver.Close()
		}
	}()
	led, err := ledger.NewSQL(ctx, saver.DB(), ledger.Options{Now: goldenNow})
	if err != nil {
		return nil, err
	}
	store, err := approval.OpenSQLStore(ctx, saver.DB(), goldenNow)
	if err != nil {
		return nil, err
	}
	agent, err := goldenApprovalAgent(fx, led, store)
	if err != nil {
		return nil, err
	}
	r, err := agent.Compile(goldenCompileOptions(saver, runs)...)
	if err != nil {
		return nil, err
	}
	inbox := approval.NewInbox(saver, store)
	worker, err := approval.NewWorker(store, approval.ResumeGraph(r), approval.WorkerOptions{})
	if err != nil {
		return nil, err
	}
	app := &goldenGraphApp[nodes.AgentState]{
		saver: saver, r: r, fx: fx, thread: goldenApprovalThread,
		input: graph.Set(nodes.AgentState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: "Please clean up /srv/old.log."}}}, "Messages"),
	}
	seen := map[string]bool{}
	// Approvals lists the pending requests of the inbox and, for the ones
	// seen before and no longer pending, their audit trail.
	app.approvals = func(ctx context.Context) ([]goldenApproval, error) {
		page, err := inbox.List(ctx, approval.Filter{Thread: goldenApprovalThread})
		if err != nil {
			return nil, err
		}
		out := []goldenApproval{}
		pending := map[string]bool{}
		for _, it := range page.Items {
			seen[it.ID], pending[it.ID] = true, true
			if _, err := store.Get(ctx, it.ID); !errors.Is(err, approval.ErrNotFound) {
				return nil, fmt.Errorf("pending approval %s: store.Get = %v, want an error matching approval.ErrNotFound (undecided)", it.ID, err)
			}
			out = append(out, goldenApproval{ID: it.ID, Node: it.Node, Tool: it.Request.Tool, Args: string(it.Request.Args), Owner: it.Request.Owner, Risk: string(it.Request.Risk)})
		}
		for _, id := range slices.Sorted(maps.Keys(seen)) {
			if pending[id] {
				continue
			}
			tr, err := store.Audit(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("audit %s: %w", id, err)
			}
			a := goldenApproval{ID: id, Tool: tr.Request.Tool, Args: string(tr.Request.Args), Owner: tr.Request.Owner, Risk: string(tr.Request.Risk),
				Outcome: string(tr.Decision.Outcome), Reviewer: tr.Decision.Reviewer, Resumed: !tr.Resume.At.IsZero(), Executed: tr.Execution != nil}
			out = append(out, a)
		}
		return out, nil
	}
	// Resuming approves every pending request in the inbox (recording the
	// decision in the store) and lets the worker resume the thread with it.
	app.resumeWith = func(ctx context.Context, _ *graph.Runnable[nodes.AgentState], thread string) error {
		page, err := inbox.List(ctx, approval.Filter{Thread: thread})
		if err != nil {
			return err
		}
		if len(page.Items) == 0 {
			return errors.New("no pending approval to decide")
		}
		for _, it := range page.Items {
			if _, err := inbox.Approve(ctx, it.ID, goldenReviewer, "golden v1"); err != nil {
				return fmt.Errorf("approve %s: %w", it.ID, err)
			}
		}
		rep, err := worker.RunOnce(ctx)
		if err != nil {
			return err
		}
		if rep.Resumed != len(page.Items) || rep.Deferred != 0 || rep.Stale != 0 {
			return fmt.Errorf("worker report %+v, want %d resumed and nothing else", rep, len(page.Items))
		}
		return nil
	}
	return app, nil
}

// ---------------------------------------------------------------------
// halfstep.db: plan fans out to fast and slow in one superstep; fast
// finishes (its writes are saved as pending writes), slow asks; a join
// then runs summarize once both are done.

const goldenHalfstepThread = "golden-halfstep-1"

type goldenFan struct {
	Request string
	Results []string       `lockstep:"append"`
	Scores  map[string]int `lockstep:"merge"`
	Summary string
}

func goldenHalfstepGraph(fx *goldenEffects) *graph.Graph[goldenFan] {
	return graph.New[goldenFan]().
		AddNode("plan", func(ctx context.Context, s goldenFan) (graph.Update[goldenFan], error) {
			fx.add("plan")
			return graph.Set(goldenFan{Results: []string{"plan " + s.Request}, Scores: map[string]int{"plan": 1}}, "Results", "Scores"), nil
		}).
		AddNode("fast", func(ctx context.Context, s goldenFan) (graph.Update[goldenFan], error) {
			fx.add("fast")
			return graph.Set(goldenFan{Results: []string{"fast " + s.Request}, Scores: map[string]int{"fast": 10}}, "Results", "Scores"), nil
		}).
		AddNode("slow", func(ctx context.Context, s goldenFan) (graph.Update[goldenFan], error) {
			fx.add("slow")
			score, err := interrupt.Ask[int](ctx, map[string]string{"prompt": "score " + s.Request + "?"})
			if err != nil {
				return graph.Update[goldenFan]{}, err
			}
			return graph.Set(goldenFan{Results: []string{fmt.Sprintf("slow %s=%d", s.Request, score)}, Scores: map[string]int{"slow": score}}, "Results", "Scores"), nil
		}).
		AddNode("summarize", func(ctx context.Context, s goldenFan) (graph.Update[goldenFan], error) {
			fx.add("summarize")
			total := 0
			for _, v := range s.Scores {
				total += v
			}
			rs := slices.Sorted(slices.Values(s.Results))
			return graph.Set(goldenFan{Summary: fmt.Sprintf("%d results, total %d: %s", len(rs), total, strings.Join(rs, "; "))}, "Summary"), nil
		}).
		AddEdge(graph.START, "plan").
		AddEdge("plan", "fast").
		AddEdge("plan", "slow").
		AddJoin([]string{"fast", "slow"}, "summarize").
		AddEdge("summarize", graph.END)
}

func openGoldenHalfstep(ctx context.Context, path, runs string) (goldenApp, error) {
	fx := newGoldenEffects("plan", "fast", "slow", "summarize")
	saver, err := openGoldenSaver(path)
	if err != nil {
		return nil, err
	}
	r, err := goldenHalfstepGraph(fx).Compile(goldenCompileOptions(saver, runs)...)
	if err != nil {
		saver.Close()
		return nil, err
	}
	return &goldenGraphApp[goldenFan]{
		saver: saver, r: r, fx: fx, thread: goldenHalfstepThread,
		input: graph.Set(goldenFan{Request: "ticket-42"}, "Request"),
		resumeWith: func(ctx context.Context, r *graph.Runnable[goldenFan], thread string) error {
			// Answer by ID, as a caller with several pauses must.
			ints, err := r.Interrupts(ctx, thread)
			if err != nil {
				return err
			}
			if len(ints) != 1 {
				return fmt.Errorf("%d pending interrupts, want 1", len(ints))
			}
			_, err = r.Resume(ctx, thread, graph.Command[goldenFan]{ResumeByID: map[string]any{ints[0].ID: 7}})
			return err
		},
	}, nil
}

// ---------------------------------------------------------------------
// The harness.

// goldenApp is one golden graph wired to a database file.
type goldenApp interface {
	// start runs the thread from its input until it pauses (generator).
	start(ctx context.Context) error
	// state summarises the thread as the want file records it.
	state(ctx context.Context) (goldenPhase, error)
	// resume answers the pause the way an operator would.
	resume(ctx context.Context) error
	effects() *goldenEffects
	Close() error
}

type goldenGraphApp[S any] struct {
	saver      *sqlite.Saver
	r          *graph.Runnable[S]
	fx         *goldenEffects
	thread     string
	input      graph.Update[S]
	resumeWith func(ctx context.Context, r *graph.Runnable[S], thread string) error
	approvals  func(ctx context.Context) ([]goldenApproval, error)
}

func (a *goldenGraphApp[S]) start(ctx context.Context) error {
	res, err := a.r.Invoke(ctx, a.thread, a.input)
	if err != nil {
		return err
	}
	if res.Status != graph.StatusWaiting {
		return fmt.Errorf("invoke: status %s, want waiting", res.Status)
	}
	return nil
}

func (a *goldenGraphApp[S]) resume(ctx context.Context) error {
	return a.resumeWith(ctx, a.r, a.thread)
}

func (a *goldenGraphApp[S]) effects() *goldenEffects { return a.fx }

func (a *goldenGraphApp[S]) Close() error { return a.saver.Close() }

func (a *goldenGraphApp[S]) state(ctx context.Context) (goldenPhase, error) {
	snap, err := a.r.GetState(ctx, a.thread)
	if err != nil {
		return goldenPhase{}, err
	}
	p := goldenPhase{Status: string(snap.Status), Next: snap.Next}
	if p.Next == nil {
		p.Next = []string{} // "next": [] in the want file, not null
	}
	if p.Values, err = goldenJSON(snap.Values); err != nil {
		return goldenPhase{}, err
	}
	for _, tk := range snap.Tasks {
		p.Tasks = append(p.Tasks, goldenTask{Name: tk.Name, Path: tk.Path, Done: tk.Result != nil, Interrupts: len(tk.Interrupts)})
	}
	for _, in := range snap.Interrupts {
		v, err := goldenJSON(in.Value)
		if err != nil {
			return goldenPhase{}, err
		}
		p.Interrupts = append(p.Interrupts, goldenInterrupt{ID: in.ID, Value: v})
	}
	if a.approvals != nil {
		if p.Approvals, err = a.approvals(ctx); err != nil {
			return goldenPhase{}, err
		}
	}
	return p, nil
}

// goldenJSON returns v as the generic JSON tree encoding/json decodes it
// to, so that states of any type compare with what a want file holds.
func goldenJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// goldenWant is the content of NAME.want.json.
type goldenWant struct {
	File   string `json:"file"`
	Covers string `json:"covers"`
	// Before is what GetState (and the approval inbox) report on the file
	// as stored.
	Before goldenPhase `json:"before"`
	// After is the thread once resumed.
	After goldenPhase `json:"after"`
	// Effects counts the side effects of the resume, in the resuming
	// process only: the work done before the pause must not run again.
	Effects map[string]int `json:"effects"`
	// WrittenEffects counts the side effects of the run that wrote the
	// file, for the reader; the test does not check it.
	WrittenEffects map[string]int `json:"written_effects"`
}

type goldenPhase struct {
	Status     string            `json:"status"`
	Next       []string          `json:"next"`
	Tasks      []goldenTask      `json:"tasks,omitempty"`
	Interrupts []goldenInterrupt `json:"interrupts,omitempty"`
	Approvals  []goldenApproval  `json:"approvals,omitempty"`
	Values     any               `json:"values"`
}

type goldenTask struct {
	Name       string `json:"name"`
	Path       string `json:"path"`
	Done       bool   `json:"done"` // finished: its writes are saved as pending writes
	Interrupts int    `json:"interrupts"`
}

type goldenInterrupt struct {
	ID    string `json:"id"`
	Value any    `json:"value"`
}

type goldenApproval struct {
	ID       string `json:"id"`
	Node     string `json:"node,omitempty"`
	Tool     string `json:"tool"`
	Args     string `json:"args"`
	Owner    string `json:"owner"`
	Risk     string `json:"risk"`
	Outcome  string `json:"outcome,omitempty"` // "" while undecided
	Reviewer string `json:"reviewer,omitempty"`
	Resumed  bool   `json:"resumed,omitempty"`
	Executed bool   `json:"executed,omitempty"`
}

type goldenCase struct {
	name   string // the file is goldenDir/name.db
	covers string
	open   func(ctx context.Context, path, runs string) (goldenApp, error)
	// check holds what must be true of a want file whatever the details
	// stored in it, so that the generator cannot bake a regression into a
	// golden file.
	check func(w goldenWant) error
}

func goldenCases() []goldenCase {
	return []goldenCase{
		{
			name:   "interrupt",
			covers: "a 4-node chain paused by interrupt.Ask in its third node (after a durable step), with an append field and a merge field holding data",
			open:   openGoldenInterrupt,
			check: func(w goldenWant) error {
				return goldenExpect(w, []string{"review"}, 1,
					map[string]int{"intake": 0, "enrich": 0, "review": 1, "reserve": 0, "publish": 1})
			},
		},
		{
			name:   "approval",
			covers: "the prebuilt agent's gated destructive tool call waiting for an approval that is stored and undecided (tool node, SQL ledger and SQL approval store in the saver's file)",
			open:   openGoldenApproval,
			check: func(w goldenWant) error {
				if len(w.Before.Approvals) != 1 || w.Before.Approvals[0].Outcome != "" || w.Before.Approvals[0].Tool != "delete_file" {
					return fmt.Errorf("before: approvals %+v, want one undecided delete_file", w.Before.Approvals)
				}
				if len(w.After.Approvals) != 1 || w.After.Approvals[0].Outcome != string(approval.Approved) || !w.After.Approvals[0].Resumed || !w.After.Approvals[0].Executed {
					return fmt.Errorf("after: approvals %+v, want one approved, resumed and executed", w.After.Approvals)
				}
				return goldenExpect(w, []string{"tools"}, 1,
					map[string]int{"model": 1, "lookup_file": 0, "delete_file": 1})
			},
		},
		{
			name:   "halfstep",
			covers: "a superstep of two parallel branches where fast finished (its writes saved as pending writes) and slow paused on interrupt.Ask; a join waits for both",
			open:   openGoldenHalfstep,
			check: func(w goldenWant) error {
				var done []string
				for _, tk := range w.Before.Tasks {
					if tk.Done {
						done = append(done, tk.Name)
					}
				}
				if !slices.Equal(done, []string{"fast"}) {
					return fmt.Errorf("before: finished tasks %v, want [fast]", done)
				}
				return goldenExpect(w, []string{"slow"}, 1,
					map[string]int{"plan": 0, "fast": 0, "slow": 1, "summarize": 1})
			},
		},
	}
}

// goldenExpect checks the shape every golden thread has: waiting on next
// with n interrupts before, done after with nothing next, and effects.
func goldenExpect(w goldenWant, next []string, n int, effects map[string]int) error {
	var errs []error
	if w.Before.Status != string(graph.StatusWaiting) || !slices.Equal(w.Before.Next, next) || len(w.Before.Interrupts) != n {
		errs = append(errs, fmt.Errorf("before: status %s next %v with %d interrupts, want waiting %v with %d", w.Before.Status, w.Before.Next, len(w.Before.Interrupts), next, n))
	}
	if w.After.Status != string(graph.StatusDone) || len(w.After.Next) != 0 || len(w.After.Interrupts) != 0 {
		errs = append(errs, fmt.Errorf("after: status %s next %v interrupts %v, want done", w.After.Status, w.After.Next, w.After.Interrupts))
	}
	if diff := cmp.Diff(effects, w.Effects); diff != "" {
		errs = append(errs, fmt.Errorf("effects of the resume (-want +got):\n%s", diff))
	}
	return errors.Join(errs...)
}

// goldenReplay copies the golden file db into dir, opens it with the
// current code and resumes it, and returns what it saw.
func goldenReplay(ctx context.Context, c goldenCase, db, dir string) (_ goldenWant, err error) {
	path := filepath.Join(dir, filepath.Base(db))
	if err := goldenCopy(db, path); err != nil {
		return goldenWant{}, err
	}
	app, err := c.open(ctx, path, "resume")
	if err != nil {
		return goldenWant{}, fmt.Errorf("open: %w", err)
	}
	defer func() {
		if cerr := app.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	got := goldenWant{File: filepath.Base(db), Covers: c.covers}
	if got.Before, err = app.state(ctx); err != nil {
		return goldenWant{}, fmt.Errorf("state before resuming: %w", err)
	}
	if err := app.resume(ctx); err != nil {
		return goldenWant{}, fmt.Errorf("resume: %w", err)
	}
	if got.After, err = app.state(ctx); err != nil {
		return goldenWant{}, fmt.Errorf("state after resuming: %w", err)
	}
	got.Effects = app.effects().snapshot()
	return got, nil
}

func goldenCopy(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// TestGoldenResume is the compatibility test of R14: it opens checkpoint
// databases written by an earlier lockstep (testdata/v1, written by
// the generator below with the code of its time) with the current saver,
// approval store and ledger, checks that each thread is still waiting
// where it was (status, next tasks, interrupts and their values, the
// pending approval, the finished half of a superstep), resumes it as an
// operator would, and compares the final values and the side effects of
// the resume with NAME.want.json.
//
// The contract: a golden file is only meaningful with the graph that
// wrote it, so the graph builders above (goldenInterruptGraph,
// goldenApprovalAgent, goldenHalfstepGraph, their tools, script and
// options) are part of the fixture and must not change in a way that
// changes what runs. When the stored format (checkpoint, pending-write,
// approval or ledger tables, the JSON of states, interrupts and requests)
// or these graphs change incompatibly, add testdata/v2 written by
// the new code (with new builders if needed) and keep v1 passing. If v1
// can no longer pass by design, say so in docs/reliability.md (R14) and in
// CHANGELOG.md as a documented break, and only then retire it. Never regenerate
// v1: regenerating writes the files with the current code and so tests
// nothing about older versions. The .db files are never edited; a want
// file's "after" section, which holds output the current code produces
// while resuming (the tool node's observation text, say), may be edited
// by hand, in review, when that output changes on purpose.
//
// Regenerate a new version's files with
//
//	LOCKSTEP_GOLDEN_WRITE=1 go test -run TestGolden ./internal/systemtest/golden
//
// (with goldenDir pointing at the new version).
func TestGoldenResume(t *testing.T) {
	if os.Getenv(goldenWriteEnv) == "1" {
		writeGoldenFiles(t)
	}
	ctx := context.Background()
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			db := filepath.Join(goldenDir, c.name+".db")
			wantFile := filepath.Join(goldenDir, c.name+".want.json")
			raw, err := os.ReadFile(wantFile)
			if err != nil {
				t.Fatalf("%s: %v (write the golden files with %s=1)", wantFile, err, goldenWriteEnv)
			}
			var want goldenWant
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&want); err != nil {
				t.Fatalf("%s: %v", wantFile, err)
			}
			if err := c.check(want); err != nil {
				t.Fatalf("%s does not hold what the %s golden must: %v", wantFile, c.name, err)
			}
			for _, suffix := range []string{"-wal", "-shm"} {
				if _, err := os.Stat(db + suffix); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s%s exists (%v): a golden file must be closed cleanly", db, suffix, err)
				}
			}
			got, err := goldenReplay(ctx, c, db, t.TempDir())
			if err != nil {
				t.Fatalf("%s: %v", db, err)
			}
			opts := cmp.Options{cmpopts.EquateEmpty(), cmpopts.IgnoreFields(goldenWant{}, "WrittenEffects")}
			if diff := cmp.Diff(want.Before, got.Before, opts); diff != "" {
				t.Errorf("%s: state before resuming differs from %s (-want +got):\n%s", db, wantFile, diff)
			}
			if diff := cmp.Diff(want.After, got.After, opts); diff != "" {
				t.Errorf("%s: state after resuming differs from %s (-want +got):\n%s", db, wantFile, diff)
			}
			if diff := cmp.Diff(want.Effects, got.Effects, opts); diff != "" {
				t.Errorf("%s: side effects of the resume differ from %s (-want +got):\n%s", db, wantFile, diff)
			}
			if c.name == "halfstep" && got.Effects["fast"] != 0 {
				t.Errorf("%s: the finished branch fast ran %d times on resume, want 0 (its pending writes must be reused)", db, got.Effects["fast"])
			}
		})
	}
}

// writeGoldenFiles writes goldenDir with the current code (and refuses to
// overwrite a golden file that exists): for each case
// it runs the graph on a fresh file until it pauses, closes the file,
// vacuums it, then resumes a copy to record NAME.want.json.
func writeGoldenFiles(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := os.MkdirAll(goldenDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range goldenCases() {
		if _, err := os.Stat(filepath.Join(goldenDir, c.name+".db")); err == nil {
			t.Fatalf("%s already holds %s.db: golden files are never rewritten (that would test nothing about older versions); "+
				"point goldenDir at a new version, or delete the files on purpose", goldenDir, c.name)
		}
	}
	for _, c := range goldenCases() {
		db := filepath.Join(goldenDir, c.name+".db")
		for _, suffix := range []string{"-wal", "-shm", "-journal"} {
			if err := os.Remove(db + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
		app, err := c.open(ctx, db, "write")
		if err != nil {
			t.Fatalf("%s: open: %v", db, err)
		}
		if err := app.start(ctx); err != nil {
			app.Close()
			t.Fatalf("%s: start: %v", db, err)
		}
		written := app.effects().snapshot()
		if err := app.Close(); err != nil {
			t.Fatalf("%s: close: %v", db, err)
		}
		if err := goldenVacuum(db); err != nil {
			t.Fatalf("%s: %v", db, err)
		}
		for _, suffix := range []string{"-wal", "-shm"} {
			if _, err := os.Stat(db + suffix); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s%s left behind (%v)", db, suffix, err)
			}
		}
		if fi, err := os.Stat(db); err != nil || fi.Size() > goldenMaxBytes {
			t.Fatalf("%s: %v, size over %d bytes", db, err, goldenMaxBytes)
		}
		want, err := goldenReplay(ctx, c, db, t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", db, err)
		}
		want.WrittenEffects = written
		if err := c.check(want); err != nil {
			t.Fatalf("%s: the current code does not resume it as a golden file must: %v", db, err)
		}
		b, err := json.MarshalIndent(want, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(goldenDir, c.name+".want.json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s and %s.want.json", db, c.name)
	}
}

// goldenVacuum compacts a closed database file. The file stays in WAL
// mode, as the saver made it; closing the last connection checkpoints the
// WAL and removes it.
func goldenVacuum(path string) error {
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		return err
	}
	var ok string
	err = db.QueryRow("PRAGMA integrity_check").Scan(&ok)
	if err == nil && ok != "ok" {
		err = fmt.Errorf("integrity_check: %s", ok)
	}
	if err == nil {
		_, err = db.Exec("VACUUM")
	}
	return errors.Join(err, db.Close())
}
