package refunds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// The example's threads. Every thread of this example starts with
// ThreadPrefix; its inbox, sweeper and worker see only those.
const (
	ThreadPaid    = "refund-A-1001" // approved by one of two racing reviewers; paid once across a crash
	ThreadExpired = "refund-A-1002" // nobody decides; it expires and the agent tells the customer
	ThreadPrefix  = "refund-"
)

// DefaultDB is the database file the program uses by default, the same as
// the lockstep CLI's.
const DefaultDB = "./lockstep.db"

// Config configures Open and Run.
type Config struct {
	// DB is the SQLite file (created if missing).
	DB string
	// Out receives Run's narrative (nil: discarded; Open ignores it).
	Out io.Writer
	// Now is the clock of everything the example stores (nil: time.Now):
	// the approval store's decisions, expiry, resume claims and retries,
	// the shop's payments, and the agent's approval requests. Run tells
	// the expiry story as if Leo Park had asked Asked ago: while it runs
	// his thread, the agent's clock reads Now minus Asked, so that his
	// request is raised already old and expires without anyone waiting.
	// Nothing else is ever moved: no lease or retry time the database
	// holds comes from a clock other processes do not share.
	Now func() time.Time
	// Lease is how long a process that died keeps its claim on a thread
	// (the graph's lease) and on an approval it was resuming (the
	// worker's), before another process may take over. Zero means the
	// defaults (graph.DefaultLeaseTTL, and a minute). Crash tests shorten
	// it; the worker then tries a failed resume again after half of it
	// (demo.WorkerOptions).
	Lease time.Duration
}

// App is the refund desk wired to one database file: the shop, the agent,
// and the approval inbox and worker of this example's threads.
type App struct {
	// Shop is the fake shop and payment provider.
	Shop *Shop
	// Runnable is the compiled agent, with one script per thread.
	Runnable *graph.Runnable[nodes.AgentState]
	// Inbox lists, decides and sweeps the approvals of this example's
	// threads.
	Inbox *approval.Inbox
	// Worker resumes the decided approvals of this example's threads.
	Worker *approval.Worker
	// Store holds the decisions (of every thread of the file).
	Store *approval.SQLStore

	saver *sqlite.Saver
	agent *storyClock
	log   *demo.DecisionLog
}

// storyClock is the agent's clock: the App's clock, set back while a
// story is told as if it happened earlier (only the times of the approval
// requests the agent raises read it). It is safe for concurrent use.
type storyClock struct {
	now  func() time.Time
	back atomic.Int64 // a time.Duration
}

// Now returns the App's time less the set-back.
func (c *storyClock) Now() time.Time { return c.now().Add(-time.Duration(c.back.Load())) }

// Open wires the example to cfg.DB: the saver, the shop, the ledger and the
// approval store (each in its own tables of the file), the executor, the
// agent, the inbox and the worker. Close it when done.
func Open(ctx context.Context, cfg Config) (_ *App, err error) {
	if cfg.DB == "" {
		cfg.DB = DefaultDB
	}
	saver, err := sqlite.Open(cfg.DB, sqlite.Config{Hook: testhook.From(ctx)}) // a crash test's hook, if ctx carries one
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			saver.Close()
		}
	}()
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	agentClock := &storyClock{now: now}
	db := saver.DB()
	shop, err := OpenShop(ctx, db, now)
	if err != nil {
		return nil, err
	}
	led, err := ledger.NewSQL(ctx, db, ledger.Options{Fence: saver}) // fenced by the thread's lease (D17)
	if err != nil {
		return nil, err
	}
	store, err := approval.OpenSQLStore(ctx, db, now)
	if err != nil {
		return nil, err
	}
	tools, err := Tools(shop)
	if err != nil {
		return nil, err
	}
	log := &demo.DecisionLog{}
	ex, err := nodes.NewExecutor(tools, nodes.WithPolicy(nodes.FromRules(Rules())), nodes.WithLedger(led), nodes.WithLogger(log.Logger()))
	if err != nil {
		return nil, err
	}
	model := demo.Scripts{}
	for _, s := range stories() {
		model[s.thread] = s.script()
	}
	agent, err := newAgent(model, ex, nodes.WithNodeClock(agentClock.Now), nodes.WithReviewContext(reviewContext(shop)), nodes.WithOutcomeRecorder(store))
	if err != nil {
		return nil, err
	}
	opts := []graph.Option{graph.WithSaver(saver), graph.WithName(GraphName)}
	if cfg.Lease > 0 {
		opts = append(opts, graph.WithLeaseTTL(cfg.Lease))
	}
	r, err := agent.Compile(opts...)
	if err != nil {
		return nil, err
	}
	owns := demo.Prefix(ThreadPrefix)
	worker, err := approval.NewWorker(store, approval.ResumeGraph(r), demo.WorkerOptions(cfg.Lease, owns))
	if err != nil {
		return nil, err
	}
	return &App{
		Shop: shop, Runnable: r, Store: store, saver: saver, agent: agentClock, log: log,
		Inbox:  approval.NewInbox(saver, store).ForThreads(owns),
		Worker: worker,
	}, nil
}

// Close closes the database.
func (a *App) Close() error { return a.saver.Close() }

// asIfAgo runs fn with the agent's clock set back by d, so that the
// approval requests it raises are dated d earlier.
func (a *App) asIfAgo(d time.Duration, fn func() error) error {
	a.agent.back.Store(int64(d))
	defer a.agent.back.Store(0)
	return fn()
}

// Statuses returns "tool:status" for every decision of the App's executor
// so far (blocked, approved, executed...), oldest first.
func (a *App) Statuses() []string { return a.log.Statuses() }

// ErrUnknownThread is returned by Start for a thread the example does not
// have.
var ErrUnknownThread = errors.New("refunds: unknown thread")

// Start starts the refund request of thread (ThreadPaid or ThreadExpired)
// with the customer's message. It returns what Runnable.Invoke returns;
// the request then waits for approval.
func (a *App) Start(ctx context.Context, thread string) (graph.Result[nodes.AgentState], error) {
	for _, s := range stories() {
		if s.thread == thread {
			return a.Runnable.Invoke(ctx, thread, graph.Set(nodes.AgentState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: s.ask}}}, "Messages"))
		}
	}
	return graph.Result[nodes.AgentState]{}, fmt.Errorf("%w: %q", ErrUnknownThread, thread)
}
