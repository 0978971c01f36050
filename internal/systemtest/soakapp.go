package systemtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/faultdb"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/scripted"
	"github.com/lockstepgo/lockstep/retry"
)

// The soak's application: a payments agent wired to one SQLite file the
// way a real one is (the saver, the SQL ledger and the SQL approval store
// in the same file), and a witness file that plays the payment provider.
//
// A thread's first step runs two branches in parallel: the agent's model
// and an audit node. The model asks for two reads at once (lookup_order,
// lookup_customer: idempotent, memoised, run in parallel by the tool
// node), then for a payment (pay: destructive, gated for a human), then
// answers. pay runs through the ledger with the thread's idempotency key;
// the provider records every call it receives under that key, so the
// witness tells "the engine called pay twice" apart from "paid twice".

// SoakState is the agent's state plus the audit branch's field.
type SoakState struct {
	Messages []nodes.Message            `lockstep:"append"`
	Memo     map[string]nodes.MemoEntry `lockstep:"merge"`
	Audit    []string                   `lockstep:"append"`
}

func soakAccess() nodes.StateAccess[SoakState] {
	return nodes.StateAccess[SoakState]{
		Messages: func(s SoakState) []nodes.Message { return s.Messages },
		Memo:     func(s SoakState) map[string]nodes.MemoEntry { return s.Memo },
		Update: func(msgs []nodes.Message, memo map[string]nodes.MemoEntry) graph.Update[SoakState] {
			if memo == nil {
				return graph.Set(SoakState{Messages: msgs}, "Messages")
			}
			return graph.Set(SoakState{Messages: msgs, Memo: memo}, "Messages", "Memo")
		},
	}
}

type soakLookupArgs struct {
	Order string `json:"order" jsonschema:"minLength=1"`
}

// SoakPayArgs are the pay tool's arguments.
type SoakPayArgs struct {
	Order  string `json:"order" jsonschema:"minLength=1"`
	Amount int    `json:"amount" jsonschema:"minimum=1"`
}

// SoakPayment is what the pay tool returns.
type SoakPayment struct {
	ID     string `json:"id"`
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

// SoakProvider is the payment provider and audit sink: a separate SQLite
// file (never under injected faults) that counts every call it receives,
// by idempotency key, and applies the effect once per key.
type SoakProvider struct{ DB *sql.DB }

const soakProviderSchema = `
CREATE TABLE IF NOT EXISTS payments (key TEXT PRIMARY KEY, thread TEXT NOT NULL, order_id TEXT NOT NULL, amount INTEGER NOT NULL, calls INTEGER NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS audits (thread TEXT PRIMARY KEY, calls INTEGER NOT NULL);`

func openSoakProvider(path string) (*SoakProvider, error) {
	db, err := OpenSideFile(path, soakProviderSchema)
	if err != nil {
		return nil, err
	}
	return &SoakProvider{DB: db}, nil
}

// Close closes the provider's database.
func (p *SoakProvider) Close() error { return p.DB.Close() }

// pay applies a payment once per key and counts the call.
func (p *SoakProvider) pay(ctx context.Context, key, thread string, a SoakPayArgs) (SoakPayment, error) {
	_, err := p.DB.ExecContext(ctx, `INSERT INTO payments(key, thread, order_id, amount, calls, pid) VALUES (?, ?, ?, ?, 1, ?)
		ON CONFLICT(key) DO UPDATE SET calls = calls + 1`, key, thread, a.Order, a.Amount, os.Getpid())
	if err != nil {
		return SoakPayment{}, nodes.Transient(err)
	}
	return SoakPayment{ID: "pay_" + key[:12], Order: a.Order, Amount: a.Amount}, nil
}

// find reports the payment made under key, if any (the reconcile hook).
func (p *SoakProvider) find(ctx context.Context, key string) (SoakPayment, bool, error) {
	var pm SoakPayment
	err := p.DB.QueryRowContext(ctx, `SELECT order_id, amount FROM payments WHERE key = ?`, key).Scan(&pm.Order, &pm.Amount)
	if errors.Is(err, sql.ErrNoRows) {
		return SoakPayment{}, false, nil
	}
	if err != nil {
		return SoakPayment{}, false, err
	}
	pm.ID = "pay_" + key[:12]
	return pm, true, nil
}

func (p *SoakProvider) audit(ctx context.Context, thread string) error {
	_, err := p.DB.ExecContext(ctx, `INSERT INTO audits(thread, calls) VALUES (?, 1) ON CONFLICT(thread) DO UPDATE SET calls = calls + 1`, thread)
	return err
}

// soakScript is the model: two reads at once, the payment, an answer.
func soakScript(order string, amount int) *scripted.Model {
	return scripted.New(
		scripted.CallTools("Let me look the order and the customer up.",
			scripted.Call("lookup-1", "lookup_order", fmt.Sprintf(`{"order":%q}`, order)),
			scripted.Call("lookup-2", "lookup_customer", fmt.Sprintf(`{"order":%q}`, order))),
		scripted.CallTools("The order qualifies; I ask to pay it back.",
			scripted.Call("pay-1", "pay", fmt.Sprintf(`{"order":%q,"amount":%d}`, order, amount))),
		scripted.Say("Done: see the payment status above."),
	)
}

// soakModel answers every thread from its own script (the order and the
// amount follow from the thread ID), so that any process can run any
// thread and answer the same.
type soakModel struct{}

func (soakModel) Generate(ctx context.Context, msgs []nodes.Message, tools []nodes.Definition) (nodes.Message, error) {
	info, ok := graph.TaskFrom(ctx)
	if !ok {
		return nodes.Message{}, errors.New("soak model: no task in context")
	}
	order, amount := SoakOrder(info.Thread)
	return soakScript(order, amount).Generate(ctx, msgs, tools)
}

// SoakOrder derives a thread's order and amount.
func SoakOrder(thread string) (string, int) {
	var h uint32 = 2166136261
	for i := 0; i < len(thread); i++ {
		h = (h ^ uint32(thread[i])) * 16777619
	}
	return "O-" + thread, int(h%9000) + 100
}

// SoakApp is one process's wiring on the database file.
type SoakApp struct {
	Saver    *sqlite.Saver
	Store    *approval.SQLStore
	Ledger   *ledger.SQL
	Provider *SoakProvider
	Runner   *graph.Runnable[SoakState]
	Inbox    *approval.Inbox
	Worker   *approval.Worker
}

// SoakAppConfig configures OpenSoakApp.
type SoakAppConfig struct {
	DB, Provider string
	DriverName   string        // "" for the plain sqlite3 driver
	LeaseTTL     time.Duration // the graph's and the worker's leases
}

// OpenSoakApp opens the soak's application on cfg.DB and cfg.Provider:
// the saver, the ledger, the approval store, the agent with its audit
// branch, the inbox and the approval worker. It returns the first error
// of opening any of them, having closed what it opened.
func OpenSoakApp(ctx context.Context, cfg SoakAppConfig) (_ *SoakApp, err error) {
	saver, err := sqlite.Open(cfg.DB, sqlite.Config{DriverName: cfg.DriverName, Synchronous: sqlite.SyncNormal, BusyTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	a := &SoakApp{Saver: saver}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if a.Provider, err = openSoakProvider(cfg.Provider); err != nil {
		return nil, err
	}
	if a.Ledger, err = ledger.NewSQL(ctx, saver.DB(), ledger.Options{}); err != nil {
		return nil, err
	}
	if a.Store, err = approval.OpenSQLStore(ctx, saver.DB(), time.Now); err != nil {
		return nil, err
	}
	lookupOrder, err := nodes.NewTool("lookup_order", "Look an order up.",
		func(ctx context.Context, a soakLookupArgs, _ nodes.Env) (map[string]any, error) {
			_, amount := SoakOrder(a.Order)
			return map[string]any{"order": a.Order, "amount": amount, "status": "delivered"}, nil
		}, nodes.Idempotent())
	if err != nil {
		return nil, err
	}
	lookupCustomer, err := nodes.NewTool("lookup_customer", "Look the customer of an order up.",
		func(ctx context.Context, a soakLookupArgs, _ nodes.Env) (map[string]any, error) {
			return map[string]any{"order": a.Order, "customer": "C-" + a.Order, "refunds": 0}, nil
		}, nodes.Idempotent())
	if err != nil {
		return nil, err
	}
	prov := a.Provider
	pay, err := nodes.NewTool("pay", "Pay an order back. Needs approval.",
		func(ctx context.Context, a SoakPayArgs, env nodes.Env) (SoakPayment, error) {
			return prov.pay(ctx, env.IdempotencyKey(), env.Thread, a)
		},
		nodes.Destructive(approval.RiskHigh),
		nodes.Reconcile(func(ctx context.Context, a SoakPayArgs, env nodes.Env) (SoakPayment, bool, error) {
			return prov.find(ctx, env.IdempotencyKey())
		}))
	if err != nil {
		return nil, err
	}
	ex, err := nodes.NewExecutor([]*nodes.Tool{lookupOrder, lookupCustomer, pay},
		nodes.WithPolicy(nodes.FromRules(approval.Rules{Owner: "payments", TTL: time.Hour})), nodes.WithLedger(a.Ledger))
	if err != nil {
		return nil, err
	}
	agent, err := nodes.NewAgentFor(soakModel{}, ex, soakAccess(), nodes.AgentOptions{MaxTurns: 4, ToolNode: []nodes.ToolNodeOption{nodes.WithOutcomeRecorder(a.Store)}})
	if err != nil {
		return nil, err
	}
	agent.Graph().
		AddNode("audit", func(ctx context.Context, s SoakState) (graph.Update[SoakState], error) {
			info, _ := graph.TaskFrom(ctx)
			if _, err := graph.Durable(ctx, "audit", func(ctx context.Context) (bool, error) { return true, prov.audit(ctx, info.Thread) }); err != nil {
				return graph.Update[SoakState]{}, err
			}
			return graph.Set(SoakState{Audit: []string{"audited " + info.Thread}}, "Audit"), nil
		}).
		AddEdge(graph.START, "audit")
	lease := cfg.LeaseTTL
	if lease == 0 {
		lease = 2 * time.Second
	}
	if a.Runner, err = agent.Compile(graph.WithSaver(saver), graph.WithLeaseTTL(lease), graph.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
		return nil, err
	}
	a.Inbox = approval.NewInbox(saver, a.Store)
	if a.Worker, err = approval.NewWorker(a.Store, approval.ResumeGraph(a.Runner), approval.WorkerOptions{
		Lease:   4 * lease,
		Retry:   &retry.Policy{Initial: 50 * time.Millisecond, Max: time.Second},
		Sweeper: a.Inbox,
	}); err != nil {
		return nil, err
	}
	return a, nil
}

// Close closes the provider and the database.
func (a *SoakApp) Close() error {
	var errs []error
	if a.Provider != nil {
		errs = append(errs, a.Provider.Close())
	}
	errs = append(errs, a.Saver.Close())
	return errors.Join(errs...)
}

// SoakUser is the customer's message that starts a thread.
func SoakUser(thread string) graph.Update[SoakState] {
	order, _ := SoakOrder(thread)
	return graph.Set(SoakState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: "Please refund order " + order + "."}}}, "Messages")
}

// SoakFaultDriver is the name of the fault-injecting driver SoakFaults
// registers (SoakAppConfig.DriverName).
const SoakFaultDriver = "lockstep_soak_fault"

// SoakTransientSQLiteFault are the SQLite errors the soak and the leak
// tests inject: busy and I/O errors, which the engine retries.
var SoakTransientSQLiteFault = []error{sqlite3.Error{Code: sqlite3.ErrBusy}, sqlite3.Error{Code: sqlite3.ErrIoErr}}

// SoakFaults registers, once per process, the fault-injecting driver the
// soak and the leak tests open the file through ([FaultDrivers] named
// [SoakFaultDriver]). It returns both layers, reset.
func SoakFaults() (before, after *faultdb.Driver) {
	before, after = FaultDrivers(SoakFaultDriver)
	before.Reset()
	after.Reset()
	return before, after
}

// SoakEditedAmount is the amount a resolver's edit pays instead.
func SoakEditedAmount(amount int) int { return amount / 2 }
