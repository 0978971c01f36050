package approval_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/lockstepgo/lockstep/approval/approvaltest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(m.Run()) // a crash child: it dies before goleak would look
	}
	goleak.VerifyTestMain(m)
}

// fakeClock is the injected clock of the stores, inboxes, workers and the
// gated node.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

var epoch = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func newClock() *fakeClock { return &fakeClock{t: epoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// sqliteDSN opens a database file as the SQLite saver does.
func sqliteDSN(path string) string {
	return "file:" + path + "?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate&_foreign_keys=on"
}

func openDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", sqliteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func tempDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lockstep.db")
	return openDB(t, path), path
}

func openSQLStore(t testing.TB, db *sql.DB, now func() time.Time) *approval.SQLStore {
	t.Helper()
	s, err := approval.OpenSQLStore(context.Background(), db, now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dumpTables renders every row of the approval tables, in key order, so
// that a test can show nothing changed.
func dumpTables(t testing.TB, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT * FROM approval_schema ORDER BY version`,
		`SELECT * FROM approval_decisions ORDER BY id`,
		`SELECT * FROM approval_executions ORDER BY approval_id`,
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if bs, ok := v.([]byte); ok {
					vals[i] = string(bs)
				}
			}
			fmt.Fprintf(&b, "%v\n", vals)
		}
		rows.Close()
		b.WriteString("--\n")
	}
	return b.String()
}

// storeKind builds one Store implementation for the shared tests. dump
// renders its whole state (the tables for SQL; the audits of known IDs for
// memory).
type storeKind struct {
	name string
	open func(t testing.TB, now func() time.Time) (approval.Store, func(ids ...string) string)
}

var storeKinds = []storeKind{
	{"memory", func(t testing.TB, now func() time.Time) (approval.Store, func(ids ...string) string) {
		s := approval.NewMemoryStore(now)
		return s, func(ids ...string) string { return dumpAudits(t, s, ids) }
	}},
	{"sql", func(t testing.TB, now func() time.Time) (approval.Store, func(ids ...string) string) {
		db, _ := tempDB(t)
		s := openSQLStore(t, db, now)
		return s, func(...string) string { return dumpTables(t, db) }
	}},
}

// desk is a test's refund desk on one store kind: the store's clock, the
// store, the fixture's graph (on a memory saver of its own) and the inbox
// over both.
type desk struct {
	clock *fakeClock
	store approval.Store
	f     *fixture
	in    *approval.Inbox
}

// onEveryStore runs test in a subtest per store kind (storeKinds), each
// on a new desk.
func onEveryStore(t *testing.T, test func(t *testing.T, d desk)) {
	t.Helper()
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			clock := newClock()
			store, _ := k.open(t, clock.Now)
			f := newFixture(t, clock, store)
			test(t, desk{clock: clock, store: store, f: f, in: approval.NewInbox(f.saver, store)})
		})
	}
}

// The store suite's fixtures (package approvaltest), under the names
// these tests use.
var (
	dumpAudits   = approvaltest.DumpAudits
	refundSchema = approvaltest.RefundSchema
	mustJSON     = approvaltest.MustJSON
	newRequest   = approvaltest.NewRequest
	newItem      = approvaltest.NewItem
)

type refundArgs = approvaltest.RefundArgs

const ttl = approvaltest.TTL

type refundState struct {
	Order    string
	Amount   int
	Outcome  approval.Outcome
	Reviewer string
	Note     string
	Paid     int
}

// witness counts actual side effects per thread.
type witness struct {
	mu sync.Mutex
	n  map[string]int
}

func (w *witness) add(thread string) {
	w.mu.Lock()
	if w.n == nil {
		w.n = map[string]int{}
	}
	w.n[thread]++
	w.mu.Unlock()
}

func (w *witness) count(thread string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[thread]
}

func (w *witness) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.n {
		n += c
	}
	return n
}

// fixture is a graph with one gated node, "refund", that asks for an
// approval exactly as the tool node will: interrupt.Ask[approval.Decision]
// with an approval.Request. When the decision allows the call, it checks
// that the arguments it runs are the approved ones, pays inside
// graph.Durable (the witness counts payments) and records the outcome.
type fixture struct {
	clock    *fakeClock
	saver    *checkpoint.MemorySaver
	run      *graph.Runnable[refundState]
	witness  *witness
	schema   json.RawMessage
	recorder approval.OutcomeRecorder // may be nil
	// beforePay, if set, runs after the decision arrived and before the
	// payment (a test stops the process there).
	beforePay func(ctx context.Context) error
}

func newFixture(t testing.TB, clock *fakeClock, recorder approval.OutcomeRecorder) *fixture {
	t.Helper()
	f := &fixture{clock: clock, saver: checkpoint.NewMemorySaver(nil), witness: &witness{}, schema: refundSchema(t), recorder: recorder}
	r, err := graph.New[refundState]().
		AddNode("refund", f.refundNode).
		AddEdge(graph.START, "refund").
		AddEdge("refund", graph.END).
		Compile(graph.WithSaver(f.saver))
	if err != nil {
		t.Fatal(err)
	}
	f.run = r
	return f
}

func (f *fixture) refundNode(ctx context.Context, s refundState) (graph.Update[refundState], error) {
	var none graph.Update[refundState]
	args, err := json.Marshal(refundArgs{Order: s.Order, Amount: s.Amount})
	if err != nil {
		return none, err
	}
	h, err := approval.ArgsHash("refund", args)
	if err != nil {
		return none, err
	}
	now := f.clock.Now()
	req := approval.Request{
		Type: approval.RequestType, Tool: "refund", Args: args, ArgsHash: h, CallID: "call-" + s.Order,
		Rationale: "the parcel never arrived", Context: json.RawMessage(`{"customer":"c-42"}`),
		Risk: approval.RiskHigh, Rule: "risk:high", Owner: "payments", Schema: f.schema,
		CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
	d, err := interrupt.Ask[approval.Decision](ctx, req)
	if err != nil {
		return none, err
	}
	out := refundState{Outcome: d.Outcome, Reviewer: d.Reviewer, Note: d.Note}
	fields := []string{"Outcome", "Reviewer", "Note"}
	if !d.Allows() {
		return graph.Set(out, fields...), nil // the model sees a rejection
	}
	run := json.RawMessage(args)
	if d.Outcome == approval.Edited {
		run = d.Args
	}
	if rh, err := approval.ArgsHash("refund", run); err != nil || rh != d.ArgsHash {
		return none, fmt.Errorf("refund: the arguments to run are not the approved ones")
	}
	var a refundArgs
	if err := json.Unmarshal(run, &a); err != nil {
		return none, err
	}
	if f.beforePay != nil {
		if err := f.beforePay(ctx); err != nil {
			return none, err
		}
	}
	info, _ := graph.TaskFrom(ctx)
	paid, err := graph.Durable(ctx, "pay", func(ctx context.Context) (int, error) {
		f.witness.add(info.Thread)
		return a.Amount, nil
	})
	if err != nil {
		return none, err
	}
	if f.recorder != nil {
		id := interrupt.ID(info.TaskID, 0) // the approval is the task's first Ask
		err := f.recorder.RecordOutcome(ctx, id, approval.Execution{
			IdempotencyKey: "refund:" + a.Order, ArgsHash: d.ArgsHash, Result: jsonOf(map[string]any{"refunded": paid}),
		})
		if err != nil {
			return none, err
		}
	}
	out.Paid = paid
	return graph.Set(out, append(fields, "Paid")...), nil
}

func jsonOf(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// start runs a new thread up to its approval and returns the interrupt ID.
func (f *fixture) start(t testing.TB, thread, order string, amount int) string {
	t.Helper()
	res, err := f.run.Invoke(context.Background(), thread, graph.Set(refundState{Order: order, Amount: amount}, "Order", "Amount"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("thread %s: status %s with %d interrupts, want waiting on 1", thread, res.Status, len(res.Interrupts))
	}
	return res.Interrupts[0].ID
}

func (f *fixture) state(t testing.TB, thread string) graph.Snapshot[refundState] {
	t.Helper()
	s, err := f.run.GetState(context.Background(), thread)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// allPending lists every pending approval through the inbox.
func allPending(t testing.TB, in *approval.Inbox, f approval.Filter) []approval.Item {
	t.Helper()
	var out []approval.Item
	for {
		p, err := in.List(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Items...)
		if p.Next == "" {
			return out
		}
		f.Cursor = p.Next
	}
}

// newWorker builds a worker; a configuration error fails the test.
func newWorker(t testing.TB, store approval.Store, resume approval.ResumeFunc, opts approval.WorkerOptions) *approval.Worker {
	t.Helper()
	w, err := approval.NewWorker(store, resume, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
