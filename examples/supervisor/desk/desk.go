package desk

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/scripted"
)

// Thread is the example's thread; its approval worker resumes only the
// threads starting with ThreadPrefix.
const (
	Thread       = "supervisor-double-charge"
	ThreadPrefix = "supervisor-"
)

// Request is what the customer writes.
const Request = "I was charged twice for order A-7, please refund one of the charges"

// Approver owns refunds; Reviewer is the person the program plays.
const (
	Approver = "billing-leads"
	Reviewer = "Ines Duarte (billing lead)"
)

// DefaultDB is the database file the program uses by default, the same as
// the lockstep CLI's.
const DefaultDB = "./lockstep.db"

// GraphName is the supervisor's graph name; the sub-agents are
// TriageGraphName and BillingGraphName.
const (
	GraphName        = "supervisor"
	TriageGraphName  = "triage"
	BillingGraphName = "billing"
)

// Case is the supervisor's state.
type Case struct {
	Request string
	// Team is the team triage routed the case to ("billing" or "done").
	Team  string
	Notes []string `lockstep:"append"` // what each sub-agent concluded
}

// Config configures Run.
type Config struct {
	DB  string    // the SQLite file (created if missing)
	Out io.Writer // the narrative (nil: discarded)
	// Now is the clock of approval requests and decisions (nil: time.Now).
	Now func() time.Time
}

// Counts is what a run did. Refunds is read from supervisor_refunds, so it
// counts every run in every process; the others count this run only.
type Counts struct {
	Refunds  int // rows in supervisor_refunds after the run
	Refunded int // refunds the payments service made in this run
	Lookups  int // order lookups triage made in this run
	Approved int // approvals the reviewer gave
	Resumed  int // threads the approval worker resumed
}

// Payments is the fake payments service: refunds in table
// supervisor_refunds, one per idempotency key.
type Payments struct {
	db       *sql.DB
	refunded atomic.Int32
	lookups  atomic.Int32
}

// OpenPayments creates the service's table in db if missing.
func OpenPayments(ctx context.Context, db *sql.DB) (*Payments, error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS supervisor_refunds (
		idempotency_key TEXT PRIMARY KEY, order_id TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		return nil, fmt.Errorf("desk: create supervisor_refunds: %w", err)
	}
	return &Payments{db: db}, nil
}

// Refund refunds amount on order under key, once per key: a repeat of a
// key returns the first refund's result without refunding again.
func (p *Payments) Refund(ctx context.Context, order string, amount int, key string) (string, error) {
	res, err := p.db.ExecContext(ctx, `INSERT OR IGNORE INTO supervisor_refunds (idempotency_key, order_id, amount) VALUES (?, ?, ?)`, key, order, amount)
	if err != nil {
		return "", fmt.Errorf("desk: refund %s: %w", order, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		p.refunded.Add(1)
	}
	return fmt.Sprintf("refunded %d EUR on %s", amount, order), nil
}

// Refunds counts the rows of supervisor_refunds.
func (p *Payments) Refunds(ctx context.Context) (int, error) {
	var n int
	err := p.db.QueryRowContext(ctx, `SELECT count(*) FROM supervisor_refunds`).Scan(&n)
	return n, err
}

// OrderArgs are the arguments of lookup_order.
type OrderArgs struct {
	OrderID string `json:"order_id" description:"the order, like A-7" jsonschema:"pattern=^A-[0-9]+$"`
}

// RefundArgs are the arguments of refund.
type RefundArgs struct {
	OrderID string `json:"order_id" description:"the order, like A-7" jsonschema:"pattern=^A-[0-9]+$"`
	Amount  int    `json:"amount" description:"euros to refund" jsonschema:"minimum=1,maximum=500"`
}

// triageModel looks the order up and names the team.
func triageModel() nodes.Model {
	return scripted.New(
		scripted.CallTools("Looking the order up.", scripted.Call("lookup-1", "lookup_order", `{"order_id":"A-7"}`)),
		scripted.Say("billing: order A-7 was charged twice (40 EUR each)."),
	)
}

// billingModel refunds one charge (gated) and answers according to what
// became of it.
func billingModel() nodes.Model {
	return demo.Branch([]scripted.Turn{
		scripted.CallTools("Order A-7 shows two charges of 40 EUR: refunding one.",
			scripted.Call("refund-1", "refund", `{"order_id":"A-7","amount":40}`)),
	}, map[nodes.Status][]scripted.Turn{
		nodes.StatusExecuted: {scripted.Say("Refunded 40 EUR on A-7; the customer is told.")},
		nodes.StatusRejected: {scripted.Say("No refund: a billing lead rejected it.")},
		nodes.StatusExpired:  {scripted.Say("No refund: nobody approved it in time.")},
	})
}

// agents builds the two sub-agents over pay, with ledger led and decision
// log log.
func agents(pay *Payments, led ledger.Ledger, log *demo.DecisionLog, now func() time.Time, rec nodes.ToolNodeOption) (triage, billing *graph.Runnable[nodes.AgentState], err error) {
	lookup, err := nodes.NewTool("lookup_order", "Look an order up: its charges.",
		func(ctx context.Context, a OrderArgs, _ nodes.Env) (string, error) {
			pay.lookups.Add(1)
			return a.OrderID + ": charged 40 EUR twice", nil
		}, nodes.Idempotent())
	if err != nil {
		return nil, nil, err
	}
	refund, err := nodes.NewTool("refund", "Refund an amount on an order.",
		func(ctx context.Context, a RefundArgs, env nodes.Env) (string, error) {
			return pay.Refund(ctx, a.OrderID, a.Amount, env.IdempotencyKey())
		}, nodes.Destructive(approval.RiskHigh))
	if err != nil {
		return nil, nil, err
	}
	build := func(name, system string, m nodes.Model, tools ...*nodes.Tool) (*graph.Runnable[nodes.AgentState], error) {
		ex, err := nodes.NewExecutor(tools, nodes.WithPolicy(nodes.FromRules(approval.Rules{Owner: Approver})), nodes.WithLedger(led), nodes.WithLogger(log.Logger()))
		if err != nil {
			return nil, err
		}
		a, err := nodes.NewAgent(m, ex, nodes.AgentOptions{System: system, MaxTurns: 6, ToolNode: []nodes.ToolNodeOption{nodes.WithNodeClock(now), rec}})
		if err != nil {
			return nil, err
		}
		return a.Compile(graph.WithName(name))
	}
	if triage, err = build(TriageGraphName, "You triage support cases: look the order up, then name the team (billing, or done).", triageModel(), lookup); err != nil {
		return nil, nil, err
	}
	if billing, err = build(BillingGraphName, "You are billing: refund what the customer was charged twice.", billingModel(), refund); err != nil {
		return nil, nil, err
	}
	return triage, billing, nil
}

// Supervisor returns the supervisor's graph over the two sub-agents:
// START → triage → billing (when triage names billing) → END.
func Supervisor(triage, billing *graph.Runnable[nodes.AgentState]) *graph.Graph[Case] {
	ask := func(c Case) graph.Update[nodes.AgentState] {
		return graph.Set(nodes.AgentState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: c.Request}}}, "Messages")
	}
	g := graph.New[Case]()
	g.AddSubgraph("triage", graph.SubgraphMap(triage, ask, func(s nodes.AgentState) graph.Update[Case] {
		answer := demo.LastAnswer(s.Messages)
		team, _, _ := strings.Cut(answer, ":")
		return graph.Set(Case{Team: team, Notes: []string{"triage: " + answer}}, "Team", "Notes")
	}))
	g.AddSubgraph("billing", graph.SubgraphMap(billing, ask, func(s nodes.AgentState) graph.Update[Case] {
		return graph.Set(Case{Notes: []string{"billing: " + demo.LastAnswer(s.Messages)}}, "Notes")
	}))
	g.AddEdge(graph.START, "triage")
	g.AddConditionalEdges("triage", func(ctx context.Context, c Case) ([]string, error) {
		if c.Team == "billing" {
			return []string{"billing"}, nil
		}
		return []string{graph.END}, nil
	}, "billing", graph.END)
	g.AddEdge("billing", graph.END)
	return g
}

// Run plays the example on cfg.DB: triage looks the order up and routes
// the case to billing, whose refund waits for a billing lead; the whole
// thread waits. The reviewer approves the request in the approval inbox
// and the approval worker resumes the thread by its ID, which reaches the
// billing subgraph: the refund happens once, and triage does not run
// again. A thread that already finished is reported, not run again.
func Run(ctx context.Context, cfg Config) (_ Counts, err error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DB == "" {
		cfg.DB = DefaultDB
	}
	saver, err := sqlite.Open(cfg.DB, sqlite.Config{})
	if err != nil {
		return Counts{}, err
	}
	defer func() { err = errors.Join(err, saver.Close()) }()
	db := saver.DB()
	pay, err := OpenPayments(ctx, db)
	if err != nil {
		return Counts{}, err
	}
	led, err := ledger.NewSQL(ctx, db, ledger.Options{Fence: saver}) // fenced by the thread's lease (D17)
	if err != nil {
		return Counts{}, err
	}
	store, err := approval.OpenSQLStore(ctx, db, cfg.Now)
	if err != nil {
		return Counts{}, err
	}
	log := &demo.DecisionLog{}
	triage, billing, err := agents(pay, led, log, cfg.Now, nodes.WithOutcomeRecorder(store))
	if err != nil {
		return Counts{}, err
	}
	r, err := Supervisor(triage, billing).Compile(graph.WithSaver(saver), graph.WithName(GraphName))
	if err != nil {
		return Counts{}, err
	}
	owns := demo.Prefix(ThreadPrefix)
	inbox := approval.NewInbox(saver, store).ForThreads(owns)
	worker, err := approval.NewWorker(store, approval.ResumeGraph(r), approval.WorkerOptions{Threads: owns})
	if err != nil {
		return Counts{}, err
	}

	p := demo.NewPrinter(cfg.Out)
	p.Printf("lockstep supervisor on %s (offline: scripted sub-agents and a fake payments service in table supervisor_refunds)\n", cfg.DB)
	p.Printf("\nThread %s: %q.\n", Thread, Request)
	var c Counts
	snap, err := r.GetState(ctx, Thread)
	switch {
	case errors.Is(err, graph.ErrThreadNotFound):
		if _, err := r.Invoke(ctx, Thread, graph.Set(Case{Request: Request}, "Request")); err != nil {
			return c, err
		}
		if snap, err = r.GetState(ctx, Thread, graph.Subgraphs()); err != nil {
			return c, err
		}
	case err != nil:
		return c, err
	}
	if snap.Status == graph.StatusFailed || snap.Status == graph.StatusPending {
		p.Printf("  Found it %s (next %v) after an interrupted earlier run: continuing it.\n", snap.Status, snap.Next)
		if _, err := r.Continue(ctx, Thread); err != nil {
			return c, err
		}
		if snap, err = r.GetState(ctx, Thread, graph.Subgraphs()); err != nil {
			return c, err
		}
	}
	if snap.Status == graph.StatusWaiting {
		p.Printf("  Triage routed the case to %s; the thread waits in %s.\n", snap.Values.Team, waitingPath(snap.Tasks))
		page, err := inbox.List(ctx, approval.Filter{Thread: Thread})
		if err != nil {
			return c, err
		}
		for _, it := range page.Items {
			req := it.Request
			p.Printf("  Approval %s asks %s: %s %s (risk %s, rule %s).\n", it.ID, req.Owner, req.Tool, req.Args, req.Risk, req.Rule)
			d, err := inbox.Approve(ctx, it.ID, Reviewer, "two charges of 40 EUR on A-7 confirmed")
			if err != nil {
				return c, err
			}
			c.Approved++
			p.Printf("  %s approves it in the approval inbox.\n", d.Reviewer)
		}
		rep, err := worker.RunOnce(ctx)
		if err != nil {
			return c, err
		}
		c.Resumed += rep.Resumed
		p.Printf("  The approval worker resumes the thread by the request's ID (%d resumed): it reaches the billing subgraph.\n", rep.Resumed)
		if snap, err = r.GetState(ctx, Thread); err != nil {
			return c, err
		}
		if snap.Status != graph.StatusDone {
			return c, fmt.Errorf("desk: thread %s is %s, not done; inspect it with lockstep state %s, then run the program again", Thread, snap.Status, Thread)
		}
		p.Printf("  Status %s.\n", snap.Status)
	} else {
		p.Printf("  Already finished (status %s): nothing runs again, nothing is refunded twice.\n", snap.Status)
	}
	for _, n := range snap.Values.Notes {
		p.Printf("    %s\n", n)
	}
	c.Refunded, c.Lookups = int(pay.refunded.Load()), int(pay.lookups.Load())
	if c.Refunds, err = pay.Refunds(ctx); err != nil {
		return c, err
	}
	p.Printf("\nThis run: triage looked %d order(s) up and payments made %d refund(s). supervisor_refunds holds %d refund(s).\n", c.Lookups, c.Refunded, c.Refunds)
	return c, p.Err()
}

// waitingPath names the nested task a snapshot (with its subgraphs) waits
// in: "billing > tools".
func waitingPath(tasks []graph.Task) string {
	for _, t := range tasks {
		if len(t.Interrupts) == 0 || t.Result != nil {
			continue
		}
		if s, ok := graph.SubgraphStateOf[nodes.AgentState](t); ok {
			if below := waitingPath(s.Tasks); below != "" {
				return t.Name + " > " + below
			}
		}
		return t.Name
	}
	return ""
}
