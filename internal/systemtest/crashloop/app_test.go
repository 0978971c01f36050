package crashloop_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
	"golang.org/x/sync/errgroup"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/crashtest"
	"github.com/lockstepgo/lockstep/internal/faultdb"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/scripted"
	"github.com/lockstepgo/lockstep/retry"
)

// The crash loop's scenario: an order desk. Inbound order messages are
// claimed once by message ID (the claim and the order row commit in one
// transaction). Each order is a thread whose graph runs two checks in
// parallel (fraud, stock), joins them, then runs an agent (a scripted
// model and a tool node) that looks the customer up (a read, memoised)
// and charges the goods and the shipping (two destructive writes in one
// message, through the idempotency ledger, with the key passed to a fake
// payment service that dedupes by key and writes the witness). Charges
// above loopGateAbove need a human:
// a simulated reviewer decides through the Inbox (approving up to
// loopRejectAbove, rejecting above), and the approval Worker resumes the
// threads. A child process works idempotently from whatever the database
// holds until every order is done, or it is killed.

// crashLoopRole is the LOCKSTEP_CHILD role of the crash loop's children.
const crashLoopRole = "crashloop"

// Environment of a crash-loop child (with crashtest.EnvPlan and EnvGen).
const (
	envLoopDir      = "LOCKSTEP_LOOP_DIR"
	envLoopScenario = "LOCKSTEP_LOOP_SCENARIO"
	// envLoopFaultSeed seeds the child's fault stream (R06), when its
	// scenario injects faults.
	envLoopFaultSeed = "LOCKSTEP_LOOP_FAULT_SEED"
)

// R06: faults inside the crash loop.
const (
	// loopFaultRate is the share of database operations that fail in
	// TestCrashLoopFaults' children.
	loopFaultRate = 0.01
	// loopFaultDriver is the database/sql driver name the children open
	// their file through when they inject faults.
	loopFaultDriver = "lockstep_loop_fault"
	// The notes a child writes about faults: "RETRY <kind>" when it
	// continues a call later after a typed store error, and "FAULTS <n>"
	// (faults injected) at a clean exit.
	loopRetryLine  = "RETRY"
	loopFaultsLine = "FAULTS"
	// loopLaterLine is the note of a faulty child that made no progress
	// for loopFaultStuck and leaves the rest to the next generation: an
	// injected fault reported a lease-taking write as failed after it
	// took effect (the approval worker's resume claim, a thread's lease),
	// and this process's clock does not reach the lease's end. The next
	// generation's clock does (systemtest.GenerationSkew).
	loopLaterLine  = "LATER"
	loopFaultStuck = 2 * time.Second
)

// errLoopLater is returned by a faulty child's work when it leaves the rest
// to the next generation (see loopLaterLine).
var errLoopLater = errors.New("crash loop: no progress; continue in the next generation")

// loopFaultSeed is the seed of cycle c's fault stream: a function of the
// run's seed and the cycle alone, like the cycle's plan, so that a seed
// replays the same faults.
func loopFaultSeed(seed uint64, c int) uint64 {
	return rand.New(rand.NewPCG(seed, 3<<40|uint64(c))).Uint64()
}

// loopFaultDrivers registers, once per process, the fault-injecting driver
// a faulty child opens its file through (as the soak does).
func loopFaultDrivers() (before, after *faultdb.Driver) {
	return systemtest.FaultDrivers(loopFaultDriver)
}

// armLoopFaults starts the fault stream of seed on both layers: half the
// rate before Begin, Exec and Query (which then do not happen), half after
// Exec, Query and Commit (which took effect; the caller is told they
// failed), each with SQLITE_BUSY or SQLITE_IOERR. The layers are split as
// in the soak (soak_test.go): BEGIN never fails after it began, and a
// Before fault on a driver-level Commit would leave the transaction open.
func armLoopFaults(seed uint64, rate float64) {
	before, after := loopFaultDrivers()
	errs := []error{sqlite3.Error{Code: sqlite3.ErrBusy}, sqlite3.Error{Code: sqlite3.ErrIoErr}}
	before.ArmRandom(seed, rate/2, faultdb.Before, []faultdb.Op{faultdb.OpBegin, faultdb.OpExec, faultdb.OpQuery}, errs...)
	after.ArmRandom(seed^0x5851f42d4c957f2d, rate/2, faultdb.After, []faultdb.Op{faultdb.OpExec, faultdb.OpQuery, faultdb.OpCommit}, errs...)
}

// loopFaultsInjected counts the faults injected so far.
func loopFaultsInjected() int {
	before, after := loopFaultDrivers()
	return len(before.Events()) + len(after.Events())
}

// loopRetryKind reports whether err is a typed store error that a faulty
// child continues later (R06), and names its kind: the saver's
// *sqlite.StoreError (busy, commit indeterminate, I/O), the ledger's
// storage failure (nodes.ErrLedger), or a driver error (sqlite3.Error,
// BUSY or IOERR) from the ledger, the approval store or the desk's own
// SQL; "node-" when a node failed of it. Anything else is not retried.
func loopRetryKind(err error) (string, bool) {
	var (
		se *sqlite.StoreError
		ne *graph.NodeError
		de sqlite3.Error
	)
	prefix := ""
	if errors.As(err, &ne) {
		prefix = "node-"
	}
	switch {
	case errors.Is(err, sqlite.ErrCommitIndeterminate):
		return prefix + "store-commit", true
	case errors.Is(err, sqlite.ErrStoreBusy):
		return prefix + "store-busy", true
	case errors.As(err, &se):
		return prefix + "store", true
	case errors.Is(err, nodes.ErrLedger):
		return prefix + "ledger", true
	case errors.As(err, &de) && (de.Code == sqlite3.ErrBusy || de.Code == sqlite3.ErrIoErr):
		if de.Code == sqlite3.ErrBusy {
			return prefix + "sqlite-busy", true
		}
		return prefix + "sqlite-ioerr", true
	}
	return "", false
}

const (
	loopGateAbove   = 100 // charges above this need an approval
	loopRejectAbove = 300 // the reviewer rejects charges above this
	// loopTimeout: a child that takes longer is stuck (a clean one takes
	// under 0.1s). It only ends a stuck child, so it is generous: on a
	// loaded machine a child may take many times as long.
	loopTimeout = 30 * time.Second
)

type loopOrder struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int    `json:"amount"`   // the goods
	Shipping int    `json:"shipping"` // the shipping fee, charged on its own
}

func (o loopOrder) thread() string  { return "order-" + o.ID }
func (o loopOrder) message() string { return "msg-" + o.ID }

// loopMessageScope is the scope of the order messages' IDs (R44).
var loopMessageScope = ledger.MessageScope("crashloop", "orders")

// charges are the order's two charges, in call order.
func (o loopOrder) charges() []loopCall {
	return []loopCall{
		{ID: "charge-1", Args: loopChargeArgs{Order: o.ID, Item: "goods", Amount: o.Amount}},
		{ID: "charge-2", Args: loopChargeArgs{Order: o.ID, Item: "shipping", Amount: o.Shipping}},
	}
}

// loopCall is a charge the model asks for, and what should become of it.
type loopCall struct {
	ID   string
	Args loopChargeArgs
}

func (c loopCall) gated() bool    { return c.Args.Amount > loopGateAbove }
func (c loopCall) approved() bool { return c.gated() && c.Args.Amount <= loopRejectAbove }
func (c loopCall) charged() bool  { return !c.gated() || c.approved() }

// subject names the charge as a logical operation, whatever its key.
func (a loopChargeArgs) subject() string { return a.Order + "/" + a.Item }

// loopScenario is one scenario's parameters, drawn from the seed.
type loopScenario struct {
	Index  int         `json:"index"`
	Seed   uint64      `json:"seed"`
	Orders []loopOrder `json:"orders"`
	Sync   string      `json:"sync"` // the saver's synchronous setting
	// Durability is the graph's durability mode (graph.WithDurability):
	// every invariant holds in each.
	Durability string `json:"durability,omitempty"`
	Parallel   int    `json:"parallel"` // threads advanced, and decisions resumed, at once
	Dups       int    `json:"dups"`     // extra deliveries per child
	// Faults is the share of database operations that fail in the
	// children (R06, TestCrashLoopFaults; 0: none).
	Faults float64 `json:"faults,omitempty"`
	// Sabotage breaks the scenario on purpose, for the negative controls
	// of TestCrashLoopDetects: "random-key" (the charge sends a fresh key
	// downstream), "early-ack" (checkpoints acknowledged before their
	// save), "no-claim" (messages not deduplicated), "early-decided"
	// (decisions acknowledged before they are recorded), "take-over"
	// (a pending intent of a dead process is taken over and the charge
	// run again, instead of reconciled).
	Sabotage string `json:"sabotage,omitempty"`
}

// newLoopScenario draws scenario index of seed: 2 to 4 orders of two
// charges each (the first order has two gated and approved charges, so
// that its tool node waits on two approvals at once), FULL or NORMAL, one
// or several threads at once.
func newLoopScenario(seed uint64, index int) loopScenario {
	r := rand.New(rand.NewPCG(seed, 1<<40|uint64(index)))
	sc := loopScenario{Index: index, Seed: seed, Sync: "FULL", Parallel: 1, Dups: 1 + r.IntN(3)}
	// Drawn from a stream of its own, so that a seed's other draws stay
	// what they were before scenarios had a mode.
	modes := []graph.DurabilityMode{graph.DurabilitySync, graph.DurabilityAsync, graph.DurabilityExit}
	sc.Durability = string(modes[rand.New(rand.NewPCG(seed, 3<<40|uint64(index))).IntN(len(modes))])
	if r.IntN(2) == 0 {
		sc.Sync = "NORMAL"
	}
	if r.IntN(2) == 0 {
		sc.Parallel = 4
	}
	amounts := []int{40, 90, 150, 250, 320, 480}
	fees := []int{20, 120, 350}
	n := 2 + r.IntN(3)
	for i := range n {
		a, f := amounts[r.IntN(len(amounts))], fees[r.IntN(len(fees))]
		if i == 0 {
			a, f = 150+100*r.IntN(2), 120
		}
		sc.Orders = append(sc.Orders, loopOrder{ID: fmt.Sprintf("s%d-o%d", index, i+1), Customer: fmt.Sprintf("cust-%d", r.IntN(2)), Amount: a, Shipping: f})
	}
	return sc
}

// loopState is an order thread's state.
type loopState struct {
	Order    loopOrder
	Checks   []string                   `lockstep:"append"`
	Messages []nodes.Message            `lockstep:"append"`
	Memo     map[string]nodes.MemoEntry `lockstep:"merge"`
}

var loopAccess = nodes.StateAccess[loopState]{
	Messages: func(s loopState) []nodes.Message { return s.Messages },
	Memo:     func(s loopState) map[string]nodes.MemoEntry { return s.Memo },
	Update: func(msgs []nodes.Message, memo map[string]nodes.MemoEntry) graph.Update[loopState] {
		fields := []string{"Messages"}
		if len(memo) > 0 {
			fields = append(fields, "Memo")
		}
		return graph.Set(loopState{Messages: msgs, Memo: memo}, fields...)
	},
}

type loopLookupArgs struct {
	Customer string `json:"customer" description:"the customer ID"`
}

type loopCustomer struct {
	Customer string `json:"customer"`
	Tier     string `json:"tier"`
}

type loopChargeArgs struct {
	Order  string `json:"order" description:"the order ID"`
	Item   string `json:"item" description:"what is charged: goods or shipping"`
	Amount int    `json:"amount" description:"the amount to charge"`
}

type loopCharge struct {
	Charge   string `json:"charge"`
	Existing bool   `json:"existing,omitempty"`
}

// loopScript is what the scripted model says for an order: look the
// customer up; look them up again (a memo hit) and charge the goods and
// the shipping (two writes, gated or not); then report.
func loopScript(o loopOrder) *scripted.Model {
	lookup := fmt.Sprintf(`{"customer":%q}`, o.Customer)
	calls := []nodes.ToolCall{scripted.Call("lookup-2", "lookup_customer", lookup)}
	for _, c := range o.charges() {
		args, _ := json.Marshal(c.Args)
		calls = append(calls, scripted.Call(c.ID, "charge", string(args)))
	}
	return scripted.New(
		scripted.CallTools("Looking the customer up.", scripted.Call("lookup-1", "lookup_customer", lookup)),
		scripted.CallTools("Charging order "+o.ID+".", calls...),
		scripted.Say("Order "+o.ID+" handled."),
	)
}

// loopModel answers each thread from its order's script (the order is the
// first user message).
var loopModel = nodes.ModelFunc(func(ctx context.Context, msgs []nodes.Message, tools []nodes.Definition) (nodes.Message, error) {
	var o loopOrder
	if len(msgs) == 0 || json.Unmarshal([]byte(msgs[0].Content), &o) != nil {
		return nodes.Message{}, errors.New("crash loop: the first message is not an order")
	}
	return loopScript(o).Generate(ctx, msgs, tools)
})

func loopRules() approval.Rules {
	return approval.Rules{
		ArgRules: []approval.ArgRule{func(tool string, args json.RawMessage) string {
			var a loopChargeArgs
			if tool == "charge" && json.Unmarshal(args, &a) == nil && a.Amount > loopGateAbove {
				return "charge_above_limit"
			}
			return ""
		}},
		TTL:   approval.MaxTTL,
		Owner: "payments",
	}
}

// loopRepeatKind is the witness kind of a call the payment service
// received under a key it had already charged (crashtest.VerifyRepeats).
const loopRepeatKind = "repeat"

// loopPayments is the fake payment service: it charges once per idempotency
// key (as Stripe does) and writes each real charge to the witness. Its
// memory of keys is the witness file itself, so it holds across processes.
type loopPayments struct {
	mu      sync.Mutex
	w       *crashtest.Witness
	charged map[string]bool
}

func openLoopPayments(w *crashtest.Witness, path string) (*loopPayments, error) {
	effects, err := crashtest.ReadWitness(path)
	if err != nil {
		return nil, err
	}
	p := &loopPayments{w: w, charged: map[string]bool{}}
	for _, e := range effects {
		if e.Kind == "charge" {
			p.charged[e.Key] = true
		}
	}
	return p, nil
}

func (p *loopPayments) charge(key, subject string) (loopCharge, error) {
	if key == "" {
		return loopCharge{}, errors.New("payments: an idempotency key is required")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	res := loopCharge{Charge: "ch_" + key[:min(12, len(key))]}
	if p.charged[key] {
		// The engine called again for a charge that happened: the
		// service dedupes it, so the charge witness cannot show it; the
		// repeat witness does (the loop's CheckCallOnce).
		if err := p.w.Record(loopRepeatKind, key, subject); err != nil {
			return loopCharge{}, err
		}
		res.Existing = true
		return res, nil
	}
	if err := p.w.Record("charge", key, subject); err != nil {
		return loopCharge{}, err
	}
	p.charged[key] = true
	return res, nil
}

func (p *loopPayments) find(key string) (loopCharge, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return loopCharge{Charge: "ch_" + key[:min(12, len(key))], Existing: true}, p.charged[key]
}

// loopDeps is what the graph's nodes use. The parent builds the graph
// with zero deps, only to read snapshots.
type loopDeps struct {
	now     func() time.Time
	hit     func(string)
	witness *crashtest.Witness
	pay     *loopPayments
	ledger  ledger.Ledger
	store   approval.OutcomeRecorder
	// freshKeys sabotages the charge: a new key downstream on every call.
	freshKeys bool
}

// loopGraph builds the order graph: START → fraud, stock (parallel) →
// join → model ↔ tools.
func loopGraph(d loopDeps) (*graph.Graph[loopState], error) {
	if d.now == nil {
		d.now = time.Now
	}
	if d.hit == nil {
		d.hit = func(string) {}
	}
	lookup, err := nodes.NewTool("lookup_customer", "Look a customer up by ID.",
		func(ctx context.Context, a loopLookupArgs, env nodes.Env) (loopCustomer, error) {
			return loopCustomer{Customer: a.Customer, Tier: "gold"}, nil
		}, nodes.Idempotent())
	if err != nil {
		return nil, err
	}
	charge, err := nodes.NewTool("charge", "Charge an order's amount to the customer.",
		func(ctx context.Context, a loopChargeArgs, env nodes.Env) (loopCharge, error) {
			if d.pay == nil {
				return loopCharge{}, errors.New("crash loop: no payment service in this process")
			}
			key := env.IdempotencyKey()
			if d.freshKeys {
				key += fmt.Sprintf("-%x", rand.Uint64())
			}
			res, err := d.pay.charge(key, a.subject())
			if err != nil {
				return loopCharge{}, err
			}
			d.hit(string(crashtest.AfterToolEffect))
			return res, nil
		},
		nodes.Destructive(approval.RiskMedium),
		nodes.Reconcile(func(ctx context.Context, a loopChargeArgs, env nodes.Env) (loopCharge, bool, error) {
			if d.pay == nil {
				return loopCharge{}, false, errors.New("crash loop: no payment service in this process")
			}
			res, ok := d.pay.find(env.IdempotencyKey())
			return res, ok, nil
		}))
	if err != nil {
		return nil, err
	}
	rules := loopRules()
	opts := []nodes.ExecutorOption{nodes.WithPolicy(nodes.FromRules(rules)), nodes.WithClock(systemtest.Clock{NowFunc: d.now})}
	if d.ledger != nil {
		opts = append(opts, nodes.WithLedger(d.ledger))
	}
	ex, err := nodes.NewExecutor([]*nodes.Tool{lookup, charge}, opts...)
	if err != nil {
		return nil, err
	}
	model, err := nodes.NewModelNode(loopModel, ex.Definitions(), loopAccess)
	if err != nil {
		return nil, err
	}
	topts := []nodes.ToolNodeOption{nodes.WithApprovalRules(rules), nodes.WithNodeClock(d.now)}
	if d.store != nil {
		topts = append(topts, nodes.WithOutcomeRecorder(d.store))
	}
	tools, err := nodes.NewToolNode(ex, loopAccess, topts...)
	if err != nil {
		return nil, err
	}
	// logged records every run of a node's task in the witness, so that a
	// task that finished is seen if it ever runs again.
	logged := func(fn graph.NodeFunc[loopState]) graph.NodeFunc[loopState] {
		return func(ctx context.Context, s loopState) (graph.Update[loopState], error) {
			if info, ok := graph.TaskFrom(ctx); ok && d.witness != nil {
				if err := d.witness.Record("run", info.TaskID, info.Thread); err != nil {
					return graph.Update[loopState]{}, err
				}
			}
			return fn(ctx, s)
		}
	}
	check := func(name string) graph.NodeFunc[loopState] {
		return func(ctx context.Context, s loopState) (graph.Update[loopState], error) {
			return graph.Set(loopState{Checks: []string{name + ":ok"}}, "Checks"), nil
		}
	}
	return graph.New[loopState]().
		AddNode("fraud", logged(check("fraud"))).
		AddNode("stock", logged(check("stock"))).
		AddNode("model", logged(model)).
		AddNode("tools", logged(tools)).
		AddEdge(graph.START, "fraud").
		AddEdge(graph.START, "stock").
		AddJoin([]string{"fraud", "stock"}, "model").
		AddConditionalEdges("model", nodes.RouteToolCalls(loopAccess.Messages, "tools"), "tools", graph.END).
		AddEdge("tools", "model"), nil
}

const loopTables = `CREATE TABLE IF NOT EXISTS crash_orders (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	message_id TEXT NOT NULL,
	body       TEXT NOT NULL
)`

// loopApp is a child process's view of the scenario.
type loopApp struct {
	sc      loopScenario
	dir     string
	gen     int
	now     func() time.Time
	rep     *crashtest.Reporter
	hook    *crashtest.Hook
	saver   *sqlite.Saver
	ledger  *ledger.SQL
	inbox   *approval.Inbox
	store   *approval.SQLStore
	worker  *approval.Worker
	run     *graph.Runnable[loopState]
	witness *crashtest.Witness
	out     io.Writer // the child's notes (R06's RETRY lines); nil: none
}

func loopPaths(dir string) (db, witness string) {
	return filepath.Join(dir, "agent.db"), filepath.Join(dir, "witness")
}

func openLoopApp(ctx context.Context, dir string, sc loopScenario, gen int, rep *crashtest.Reporter, hook *crashtest.Hook) (_ *loopApp, err error) {
	off := time.Duration(gen) * systemtest.GenerationSkew
	now := func() time.Time { return time.Now().Add(off) }
	a := &loopApp{sc: sc, dir: dir, gen: gen, now: now, rep: rep, hook: hook}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	dbPath, wPath := loopPaths(dir)
	if a.witness, err = crashtest.OpenWitness(wPath, gen); err != nil {
		return nil, err
	}
	pay, err := openLoopPayments(a.witness, wPath)
	if err != nil {
		return nil, err
	}
	cfg := sqlite.Config{Synchronous: sqlite.Synchronous(sc.Sync), Now: now, Hook: hook.Hit}
	if sc.Faults > 0 {
		loopFaultDrivers()
		cfg.DriverName = loopFaultDriver
	}
	if a.saver, err = sqlite.Open(dbPath, cfg); err != nil {
		return nil, err
	}
	db := a.saver.DB()
	if _, err = db.ExecContext(ctx, loopTables); err != nil {
		return nil, err
	}
	if a.ledger, err = ledger.NewSQL(ctx, db, ledger.Options{Now: now, Retention: 10 * 365 * 24 * time.Hour}); err != nil {
		return nil, err
	}
	if a.store, err = approval.OpenSQLStore(ctx, db, now); err != nil {
		return nil, err
	}
	led := crashtest.AckLedger(a.ledger, rep)
	if sc.Sabotage == "take-over" {
		led = takeOverLedger{led}
	}
	g, err := loopGraph(loopDeps{now: now, hit: hook.Hit, witness: a.witness, pay: pay, ledger: led, store: a.store,
		freshKeys: sc.Sabotage == "random-key"})
	if err != nil {
		return nil, err
	}
	saver := crashtest.AckSaver(a.saver, rep)
	if sc.Sabotage == "early-ack" {
		saver = earlyAckSaver{a.saver, rep}
	}
	// The graph's crash points come from the runs' context (see work's caller).
	mode := graph.DurabilityMode(sc.Durability)
	if mode == "" {
		mode = graph.DurabilitySync
	}
	if a.run, err = g.Compile(graph.WithSaver(saver), graph.WithClock(now), graph.WithDurability(mode)); err != nil {
		return nil, err
	}
	// The desk owns the order threads of the file (others may share it).
	ours := func(thread string) bool { return strings.HasPrefix(thread, "order-") }
	a.inbox = approval.NewInbox(a.saver, a.store).ForThreads(ours)
	if a.worker, err = approval.NewWorker(a.store, approval.ResumeGraph(a.run), approval.WorkerOptions{
		Concurrency: sc.Parallel, Retry: &retry.Policy{Initial: time.Millisecond, Multiplier: 1}, Threads: ours,
	}); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *loopApp) close() error {
	var errs []error
	if a.saver != nil {
		errs = append(errs, a.saver.Close())
	}
	if a.witness != nil {
		errs = append(errs, a.witness.Close())
	}
	return errors.Join(errs...)
}

// work delivers the messages, then advances threads, decides approvals
// and resumes decisions until every order is done. In a scenario with
// faults (R06) a typed store error ends the pass, not the child: the next
// pass does the work again (later).
func (a *loopApp) work(ctx context.Context) error {
	deadline := time.Now().Add(loopTimeout)
	if a.sc.Faults > 0 {
		deadline = time.Now().Add(loopFaultStuck)
	}
	delivered := false
	for {
		done, why, err := a.pass(ctx, &delivered)
		if err := a.later(err); err != nil {
			return err
		}
		if done {
			return nil
		}
		if err != nil {
			why = err.Error()
		}
		if time.Now().After(deadline) && a.sc.Faults > 0 {
			return fmt.Errorf("%w: %s", errLoopLater, why)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stuck after %v: %s", loopTimeout, why)
		}
		time.Sleep(time.Millisecond)
	}
}

// pass is one pass of work: deliver the messages (until they are), advance
// every order's thread, review, resume, and report whether everything is
// finished and if not, why.
func (a *loopApp) pass(ctx context.Context, delivered *bool) (bool, string, error) {
	if !*delivered {
		if err := a.deliver(ctx); err != nil {
			return false, "", err
		}
		*delivered = true
	}
	orders, err := a.orders(ctx)
	if err != nil {
		return false, "", err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(a.sc.Parallel)
	for _, o := range orders {
		g.Go(func() error { return a.later(a.advance(gctx, o)) })
	}
	if err := g.Wait(); err != nil {
		return false, "", err
	}
	if err := a.review(ctx); err != nil {
		return false, "", err
	}
	if _, err := a.worker.RunOnce(ctx); err != nil {
		return false, "", fmt.Errorf("worker: %w", err)
	}
	return a.finished(ctx, orders)
}

// later returns err, or nil when the scenario injects faults (R06) and err
// is a typed store error: the call is continued later, by the next pass.
// It writes a "RETRY <kind>" note for each.
func (a *loopApp) later(err error) error {
	if err == nil || a.sc.Faults == 0 {
		return err
	}
	kind, ok := loopRetryKind(err)
	if !ok {
		return err
	}
	a.retried(kind)
	return nil
}

func (a *loopApp) retried(kind string) {
	if a.out != nil {
		fmt.Fprintf(a.out, "%s %s\n", loopRetryLine, kind) // one write: lines never interleave
	}
}

// deliver delivers every order message, some of them twice, in an order
// of this generation. Each is claimed by message ID in the transaction
// that records the order (ClaimMessageTx): a crash after the claim rolls
// the claim back with the effect.
func (a *loopApp) deliver(ctx context.Context) error {
	r := rand.New(rand.NewPCG(a.sc.Seed, 2<<40|uint64(a.gen)))
	msgs := slices.Clone(a.sc.Orders)
	for range a.sc.Dups {
		msgs = append(msgs, a.sc.Orders[r.IntN(len(a.sc.Orders))])
	}
	r.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	for _, o := range msgs {
		if err := a.claim(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

func (a *loopApp) claim(ctx context.Context, o loopOrder) error {
	body, err := json.Marshal(o)
	if err != nil {
		return err
	}
	tx, err := a.saver.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if a.sc.Sabotage != "no-claim" {
		// A redelivery carries the same body, so a mismatch
		// (ErrDuplicateMismatch) is a failure, not a duplicate (R44).
		m := ledger.Claim{Scope: loopMessageScope, ID: o.message(), Fingerprint: ledger.MessageFingerprint(body)}
		switch err := a.ledger.ClaimMessageTx(ctx, tx, m); {
		case errors.Is(err, ledger.ErrDuplicateMessage):
			return nil
		case err != nil:
			return fmt.Errorf("claim %s: %w", o.message(), err)
		}
	}
	a.hook.Hit(string(crashtest.AfterClaim))
	if _, err := tx.ExecContext(ctx, `INSERT INTO crash_orders (message_id, body) VALUES (?, ?)`, o.message(), string(body)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	a.rep.EffectAck("msg:" + o.message())
	return nil
}

// loopOrders reads the orders recorded from messages.
func loopOrders(ctx context.Context, db *sql.DB) ([]loopOrder, error) {
	rows, err := db.QueryContext(ctx, `SELECT body FROM crash_orders ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []loopOrder
	seen := map[string]bool{}
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		var o loopOrder
		if err := json.Unmarshal([]byte(body), &o); err != nil {
			return nil, err
		}
		if !seen[o.ID] {
			seen[o.ID] = true
			out = append(out, o)
		}
	}
	return out, rows.Err()
}

func (a *loopApp) orders(ctx context.Context) ([]loopOrder, error) {
	return loopOrders(ctx, a.saver.DB())
}

func loopInput(o loopOrder) graph.Update[loopState] {
	body, _ := json.Marshal(o)
	return graph.Set(loopState{Order: o, Messages: []nodes.Message{{Role: nodes.RoleUser, Content: string(body)}}}, "Order", "Messages")
}

// advance starts an order's thread, or continues it when it is pending.
func (a *loopApp) advance(ctx context.Context, o loopOrder) error {
	th := o.thread()
	snap, err := a.run.GetState(ctx, th)
	switch {
	case errors.Is(err, graph.ErrThreadNotFound):
		_, err = a.run.Invoke(ctx, th, loopInput(o))
	case err != nil:
		return fmt.Errorf("state of %s: %w", th, err)
	case snap.Status == graph.StatusPending:
		_, err = a.run.Continue(ctx, th)
	case snap.Status == graph.StatusFailed && a.sc.Faults > 0:
		// R06: a node failed of an injected fault (a ledger or approval
		// store error); the thread is continued, as after a crash.
		a.retried("continue-failed")
		_, err = a.run.Continue(ctx, th)
	case snap.Status == graph.StatusFailed:
		return fmt.Errorf("thread %s failed: %+v", th, snap.Tasks)
	default:
		return nil
	}
	if errors.Is(err, checkpoint.ErrThreadBusy) || errors.Is(err, checkpoint.ErrConflict) {
		return nil // the worker holds it; the next pass looks again
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", th, err)
	}
	return nil
}

// review decides every pending approval: approve up to loopRejectAbove,
// reject above.
func (a *loopApp) review(ctx context.Context) error {
	page, err := a.inbox.List(ctx, approval.Filter{Limit: approval.MaxPageSize})
	if err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	for _, it := range page.Items {
		var args loopChargeArgs
		if err := json.Unmarshal(it.Request.Args, &args); err != nil {
			return fmt.Errorf("approval %s: %w", it.ID, err)
		}
		reviewer := fmt.Sprintf("reviewer-%d", a.gen)
		if a.sc.Sabotage == "early-decided" {
			a.rep.Decided(it.ID, string(approval.Approved))
			a.hook.Hit(string(crashtest.AfterDecision))
		}
		var d approval.Decision
		if args.Amount > loopRejectAbove {
			d, err = a.inbox.Reject(ctx, it.ID, reviewer, "over the limit")
		} else {
			d, err = a.inbox.Approve(ctx, it.ID, reviewer, "ok")
		}
		if errors.Is(err, approval.ErrAlreadyDecided) {
			continue
		}
		if err != nil {
			return fmt.Errorf("decide %s: %w", it.ID, err)
		}
		a.rep.Decided(it.ID, string(d.Outcome))
		a.hook.Hit(string(crashtest.AfterDecision))
	}
	return nil
}

// finished reports whether every order has a thread that is done and no
// decision waits to be resumed, and if not, why.
func (a *loopApp) finished(ctx context.Context, orders []loopOrder) (bool, string, error) {
	if len(orders) < len(a.sc.Orders) {
		return false, fmt.Sprintf("%d of %d orders recorded", len(orders), len(a.sc.Orders)), nil
	}
	for _, o := range orders {
		snap, err := a.run.GetState(ctx, o.thread())
		if errors.Is(err, graph.ErrThreadNotFound) && a.sc.Faults > 0 {
			// R06: a fault failed the thread's first save; the next
			// pass starts it again.
			return false, o.thread() + " is not started", nil
		}
		if err != nil {
			return false, "", err
		}
		// A thread waiting on an approval whose decision was marked
		// resumed would wait forever (R37): fail now, loudly.
		for _, in := range snap.Interrupts {
			if rec, err := a.store.Get(ctx, in.ID); err == nil && !rec.Resume.At.IsZero() {
				return false, "", fmt.Errorf("%s waits on approval %s, whose decision (%s) was marked resumed (%s): the answer was lost",
					o.thread(), in.ID, rec.Decision.Outcome, rec.Resume.Note)
			}
		}
		if snap.Status != graph.StatusDone {
			return false, fmt.Sprintf("%s is %s (next %v)", o.thread(), snap.Status, snap.Next), nil
		}
	}
	un, err := a.store.Unresumed(ctx, 0)
	if err != nil {
		return false, "", err
	}
	if len(un) > 0 {
		return false, fmt.Sprintf("%d decisions unresumed", len(un)), nil
	}
	return true, "", nil
}

// earlyAckSaver is the sabotage "early-ack": it acknowledges a
// checkpoint before saving it.
type earlyAckSaver struct {
	checkpoint.Saver
	rep *crashtest.Reporter
}

func (s earlyAckSaver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	s.rep.Ack(req.Thread, req.Checkpoint.ID)
	return s.Saver.Put(ctx, req)
}

// takeOverLedger is the sabotage "take-over": every Begin takes over a
// pending intent whose lease ended, so a call whose outcome is unknown
// runs again instead of going to the reconcile hook.
type takeOverLedger struct{ ledger.Ledger }

func (l takeOverLedger) Begin(ctx context.Context, in ledger.Intent) (ledger.Entry, bool, error) {
	in.TakeOver = true
	return l.Ledger.Begin(ctx, in)
}

// runCrashLoopChild is a crash-loop child: it works on the scenario until
// every order is done (exit 0 after DONE) or its plan kills it.
func runCrashLoopChild() int {
	ctx := context.Background()
	var sc loopScenario
	ch, err := systemtest.ChildConfig(envLoopScenario, &sc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	rep := crashtest.NewReporter(os.Stdout)
	hook := crashtest.NewHook(ch.Plan, rep, nil)
	a, err := openLoopApp(ctx, os.Getenv(envLoopDir), sc, ch.Gen, rep, hook)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 4
	}
	if sc.Faults > 0 {
		// R06: the fault stream starts once the file is open (faults
		// while opening are R07's business), seeded by the parent.
		seed, err := strconv.ParseUint(os.Getenv(envLoopFaultSeed), 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fault seed:", err)
			return 3
		}
		a.out = os.Stdout
		armLoopFaults(seed, sc.Faults)
	}
	err = a.work(testhook.With(ctx, hook.Hit)) // every run meets the plan's graph points
	if errors.Is(err, errLoopLater) {
		// R06: leave the rest to the next generation (exit 0 without DONE).
		fmt.Printf("%s %q\n", loopLaterLine, err.Error())
		fmt.Printf("%s %d\n", loopFaultsLine, loopFaultsInjected())
		a.close()
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "work:", err)
		a.close()
		return 5
	}
	if err := a.close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 6
	}
	if sc.Faults > 0 {
		fmt.Printf("%s %d\n", loopFaultsLine, loopFaultsInjected())
	}
	rep.Hits(hook.Hits())
	rep.Done()
	if err := rep.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		return 7
	}
	return 0
}
