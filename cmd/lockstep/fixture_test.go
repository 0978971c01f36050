package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/quickstart/order"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// t0 is when the fixture's graphs start (their clock); the CLI's clock in
// most tests is t0 + 1h (cliNow).
func t0() time.Time     { return time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC) }
func cliNow() time.Time { return t0().Add(time.Hour) }

// The fixture's threads, one per status (and two waiting on approvals).
const (
	threadDone       = "order-done" // quickstart graph, answered and finished
	threadRefund     = "refund-7"   // waiting on an approval request (refund, payments, expires t0+1h10m)
	threadEmail      = "email-3"    // waiting on an approval request (send_email, support, expires in 24h)
	threadFailed     = "import-9"   // a node failed
	threadPending    = "batch-4"    // stopped by a cancelled context between steps
	threadBreakpoint = "deploy-1"   // waiting at a static breakpoint before deploy
	refundTTL        = time.Hour
	emailTTL         = 24 * time.Hour
)

// fixture is a database produced by running real graphs through the
// SQLite saver, with the graph clock pinned and seeded IDs.
type fixture struct {
	path     string // the database; copy it (copyDB) before changing it
	refundID string // approval (interrupt) ID of threadRefund
	emailID  string // approval ID of threadEmail
	// refundInput is the first checkpoint of threadRefund.
	refundInput string
}

// Call is the state of the gated graph: a tool call that needs a human's
// approval, asked exactly as the tool node asks (interrupt.Ask with an
// approval.Request).
type Call struct {
	Tool      string
	Args      map[string]any
	Owner     string
	Rationale string
	Log       []string `lockstep:"append"`
	Result    string
}

// schemas are the argument schemas of the gated tools.
func schemaOf(tool string) json.RawMessage {
	switch tool {
	case "refund":
		return json.RawMessage(`{"type":"object","properties":{"order":{"type":"string"},"amount":{"type":"integer","minimum":1,"maximum":100}},"required":["order","amount"],"additionalProperties":false}`)
	case "send_email":
		return json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"},"body":{"type":"string","maxLength":500}},"required":["to","body"],"additionalProperties":false}`)
	}
	return nil
}

// gatedGraph is plan → execute; execute asks for approval with a request
// that expires ttl after clock() and runs the call (approved or edited
// arguments) or reports the rejection.
func gatedGraph(clock func() time.Time, ttl time.Duration) *graph.Graph[Call] {
	return askingGraph(clock, ttl, "", "risk:high") // kind "": a gate, as requests before kinds were
}

// askingGraph is gatedGraph whose requests are of kind, raised by rule.
func askingGraph(clock func() time.Time, ttl time.Duration, kind approval.Kind, rule string) *graph.Graph[Call] {
	return graph.New[Call]().
		AddNode("plan", func(ctx context.Context, c Call) (graph.Update[Call], error) {
			return graph.Set(Call{Log: []string{"planned " + c.Tool}}, "Log"), nil
		}).
		AddNode("execute", func(ctx context.Context, c Call) (graph.Update[Call], error) {
			args, err := json.Marshal(c.Args)
			if err != nil {
				return graph.Update[Call]{}, err
			}
			hash, err := approval.ArgsHash(c.Tool, args)
			if err != nil {
				return graph.Update[Call]{}, err
			}
			now := clock()
			d, err := interrupt.Ask[approval.Decision](ctx, approval.Request{
				Type: approval.RequestType, Tool: c.Tool, Args: args, ArgsHash: hash, CallID: "call-" + c.Tool,
				Rationale: c.Rationale, Context: json.RawMessage(`{"customer":"c-9","orders":3}`),
				Risk: approval.RiskHigh, Rule: rule, Owner: c.Owner, Schema: schemaOf(c.Tool),
				CreatedAt: now, ExpiresAt: now.Add(ttl), Kind: kind,
			})
			if err != nil {
				return graph.Update[Call]{}, err
			}
			if !d.Allows() {
				return graph.Set(Call{Result: fmt.Sprintf("not run: %s by %s: %s", d.Outcome, d.Reviewer, d.Note)}, "Result"), nil
			}
			run := json.RawMessage(args)
			if d.Outcome == approval.Edited {
				run = d.Args
			}
			return graph.Set(Call{Result: fmt.Sprintf("ran %s %s", c.Tool, run), Log: []string{"executed"}}, "Result", "Log"), nil
		}).
		AddEdge(graph.START, "plan").AddEdge("plan", "execute")
}

// Job is the state of the failing, pending and breakpoint graphs.
type Job struct {
	Source string
	Rows   int
	Log    []string `lockstep:"append"`
}

func jobGraph(first, second string, secondNode graph.NodeFunc[Job]) *graph.Graph[Job] {
	return graph.New[Job]().
		AddNode(first, func(ctx context.Context, j Job) (graph.Update[Job], error) {
			return graph.Set(Job{Rows: 3, Log: []string{first + " " + j.Source}}, "Rows", "Log"), nil
		}).
		AddNode(second, secondNode).
		AddEdge(graph.START, first).AddEdge(first, second)
}

func logNode(name string) graph.NodeFunc[Job] {
	return func(ctx context.Context, j Job) (graph.Update[Job], error) {
		return graph.Set(Job{Log: []string{name}}, "Log"), nil
	}
}

// lockedReader makes a seeded random stream safe for concurrent reads.
type lockedReader struct {
	mu sync.Mutex
	r  io.Reader
}

func (l *lockedReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Read(p)
}

// graphEnv runs the fixture's graphs on one saver with a settable clock and
// one seeded random stream (so checkpoint, task and interrupt IDs are the
// same in every run, and distinct across threads).
type graphEnv struct {
	saver checkpoint.Saver
	now   atomic.Int64
	rnd   *lockedReader
}

func newGraphEnv(saver checkpoint.Saver) *graphEnv {
	g := &graphEnv{saver: saver, rnd: &lockedReader{r: rand.NewChaCha8([32]byte{'l', 'o', 'c', 'k', 's', 't', 'e', 'p'})}}
	g.at(0)
	return g
}

func (g *graphEnv) clock() time.Time { return time.Unix(0, g.now.Load()).UTC() }

// at sets the graph clock to t0 + d.
func (g *graphEnv) at(d time.Duration) { g.now.Store(t0().Add(d).UnixNano()) }

func (g *graphEnv) options(extra ...graph.Option) []graph.Option {
	return append([]graph.Option{graph.WithSaver(g.saver), graph.WithClock(g.clock), graph.WithRandom(g.rnd)}, extra...)
}

// buildFixture runs the fixture's graphs into a new database file.
func buildFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lockstep.db")
	saver, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer saver.Close()
	g := newGraphEnv(saver)
	f := &fixture{path: path}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// done: the quickstart graph, asked and answered.
	var counts order.Counts
	qs, err := order.Graph(&counts).Compile(g.options(graph.WithName(order.GraphName))...)
	must(err)
	_, err = qs.Invoke(ctx, threadDone, graph.Set(order.Order{Item: "lamp"}, "Item"))
	must(err)
	g.at(time.Minute)
	res, err := qs.Resume(ctx, threadDone, graph.Command[order.Order]{Resume: true})
	must(err)
	if res.Status != graph.StatusDone || counts.Charges != 1 {
		t.Fatalf("%s: status %s, %d charges; want done, 1", threadDone, res.Status, counts.Charges)
	}

	// waiting on approval requests.
	g.at(10 * time.Minute)
	refund, err := gatedGraph(g.clock, refundTTL).Compile(g.options()...)
	must(err)
	res2, err := refund.Invoke(ctx, threadRefund, graph.Set(Call{Tool: "refund", Args: map[string]any{"order": "A-7", "amount": 40},
		Owner: "payments", Rationale: "the parcel was lost in transit"}, "Tool", "Args", "Owner", "Rationale"))
	must(err)
	if res2.Status != graph.StatusWaiting || len(res2.Interrupts) != 1 {
		t.Fatalf("%s: %s with %d interrupts; want waiting on 1", threadRefund, res2.Status, len(res2.Interrupts))
	}
	f.refundID = res2.Interrupts[0].ID
	g.at(20 * time.Minute)
	email, err := gatedGraph(g.clock, emailTTL).Compile(g.options()...)
	must(err)
	res2, err = email.Invoke(ctx, threadEmail, graph.Set(Call{Tool: "send_email", Args: map[string]any{"to": "ana@example.com", "body": "Your refund <b>is</b> on its way"},
		Owner: "support", Rationale: "the customer asked for a confirmation"}, "Tool", "Args", "Owner", "Rationale"))
	must(err)
	f.emailID = res2.Interrupts[0].ID

	// failed: the second node returns an error; the run's checkpoints
	// are written in the async durability mode (state and history show
	// it).
	g.at(30 * time.Minute)
	failing, err := jobGraph("fetch", "import", func(ctx context.Context, j Job) (graph.Update[Job], error) {
		return graph.Update[Job]{}, fmt.Errorf("upstream returned 503 for %s", j.Source)
	}).Compile(g.options(graph.WithName("import"), graph.WithDurability(graph.DurabilityAsync))...)
	must(err)
	_, err = failing.Invoke(ctx, threadFailed, graph.Set(Job{Source: "s3://bucket/orders.csv"}, "Source"))
	var nerr *graph.NodeError
	if !errors.As(err, &nerr) {
		t.Fatalf("%s: err = %v, want a *graph.NodeError", threadFailed, err)
	}

	// pending: the first node's run is cancelled; the run stops before
	// the next step.
	g.at(40 * time.Minute)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	pending, err := graph.New[Job]().
		AddNode("extract", func(ctx context.Context, j Job) (graph.Update[Job], error) {
			cancel()
			return graph.Set(Job{Rows: 7, Log: []string{"extracted"}}, "Rows", "Log"), nil
		}).
		AddNode("load", logNode("loaded")).
		AddEdge(graph.START, "extract").AddEdge("extract", "load").
		Compile(g.options(graph.WithName("batch"))...)
	must(err)
	_, err = pending.Invoke(runCtx, threadPending, graph.Set(Job{Source: "batch 4"}, "Source"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%s: err = %v, want context.Canceled", threadPending, err)
	}

	// waiting at a static breakpoint before deploy.
	g.at(50 * time.Minute)
	bp, err := jobGraph("build", "deploy", logNode("deployed")).Compile(g.options(graph.WithName("deploy"), graph.WithInterruptBefore("deploy"))...)
	must(err)
	res3, err := bp.Invoke(ctx, threadBreakpoint, graph.Set(Job{Source: "v1.2.0"}, "Source"))
	must(err)
	if res3.Status != graph.StatusWaiting {
		t.Fatalf("%s: status %s, want waiting", threadBreakpoint, res3.Status)
	}
	// While it waits, a new version of the deploy graph starts (it adds a
	// verify step, and breaks after deploy instead of before it): lockstep
	// state warns that the thread was saved under another version.
	g.at(55 * time.Minute)
	bp2, err := jobGraph("build", "deploy", logNode("deployed")).AddNode("verify", logNode("verified")).AddEdge("deploy", "verify").
		Compile(g.options(graph.WithName("deploy"), graph.WithInterruptAfter("deploy"))...)
	must(err)
	must(bp2.SaveTopology(ctx))
	// The saver stamps topologies with the wall clock: pin them to the
	// graph clock of the run that stored each.
	pin := map[string]time.Duration{qs.Name(): 0, refund.Name(): 10 * time.Minute, failing.Name(): 30 * time.Minute,
		pending.Name(): 40 * time.Minute, bp.Name(): 50 * time.Minute}
	for name, d := range pin {
		at := t0().Add(d).Format(time.RFC3339Nano)
		_, err := saver.DB().ExecContext(ctx, `UPDATE topologies SET created_at = ?, stored_at = ? WHERE name = ?`, at, at, name)
		must(err)
	}
	fp2, err := bp2.Topology().Fingerprint()
	must(err)
	at := t0().Add(55 * time.Minute).Format(time.RFC3339Nano)
	_, err = saver.DB().ExecContext(ctx, `UPDATE topologies SET created_at = ?, stored_at = ? WHERE fingerprint = ?`, at, at, fp2)
	must(err)

	hist, err := saver.List(ctx, threadRefund, checkpoint.ListOptions{})
	must(err)
	f.refundInput = hist[len(hist)-1].Checkpoint.ID
	return f
}

// copyDB copies the fixture's database into a new directory and returns
// the copy's path. The fixture's saver is closed, so the file is whole.
func (f *fixture) copyDB(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, sfx := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(f.path + sfx); err == nil {
			t.Fatalf("%s%s exists: the fixture's saver was not closed", f.path, sfx)
		}
	}
	p := filepath.Join(t.TempDir(), "lockstep.db")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
