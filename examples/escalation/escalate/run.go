package escalate

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// The example's threads; every thread of this example starts with
// ThreadPrefix.
const (
	ThreadSlow   = "escalation-checkout-latency" // the tracker is slow: one issue all the same
	ThreadOutage = "escalation-refund-webhook"   // the tracker is down: a degraded answer
	ThreadPrefix = "escalation-"
)

// DefaultDB is the database file the program uses by default, the same as
// the lockstep CLI's.
const DefaultDB = "./lockstep.db"

// The users' requests.
const (
	askSlow   = "Checkout p95 latency has been above 2 s since 14:00 UTC. Open an issue for the payments team."
	askOutage = "The refund webhook is failing with 500s. Escalate it to the payments team."
)

// Config configures Run.
type Config struct {
	// DB is the SQLite file (created if missing).
	DB string
	// Out receives the narrative (nil: discarded).
	Out io.Writer
	// Timeout is create_issue's per-attempt timeout and Latency the time
	// the tracker takes to answer a create (defaults DefaultTimeout and
	// DefaultLatency). Keep Latency above Timeout: that is the story.
	Timeout, Latency time.Duration
	// Now stamps issues and outbox entries (nil: time.Now).
	Now func() time.Time
	// Lease is how long a process that died keeps its claim on a thread
	// (the graph's lease) before another process may take over. Zero
	// means graph.DefaultLeaseTTL. Crash tests shorten it.
	Lease time.Duration
}

// Counts is what a run did. Issues and Queued are read from the tables, so
// they count every run in every process; the others count this run only.
type Counts struct {
	Issues    int // rows in tracker_issues after the run
	Queued    int // rows in escalation_outbox after the run
	Requests  int // requests the tracker received
	Created   int // issues the tracker created
	Retries   int // attempts the executor retried
	Replayed  int // calls the ledger answered with a stored result
	Fallbacks int // calls whose tool failed and whose fallback ran
}

// Run plays the example on cfg.DB and tells what happens on cfg.Out:
//
//  1. Thread ThreadSlow: the agent files an issue while the tracker is
//     slow. The first attempt creates the issue but answers after the
//     tool's timeout; the executor retries with the same idempotency key
//     and the tracker returns the issue it created. The agent then calls
//     create_issue again with the same arguments, and the ledger answers
//     with the stored result. The tracker holds exactly one issue, and the
//     tool result carries success, number, URL, repository, created at and
//     the idempotency key.
//  2. Thread ThreadOutage: the tracker is down (503 to every request). The
//     retries are used up, the fallback queues the escalation in a local
//     outbox, and the agent gives the user a degraded answer: what failed,
//     what was done instead and what to do next.
//
// A thread that already finished is not run again.
func Run(ctx context.Context, cfg Config) (_ Counts, err error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.DB == "" {
		cfg.DB = DefaultDB
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Latency <= 0 {
		cfg.Latency = DefaultLatency
	}
	saver, err := sqlite.Open(cfg.DB, sqlite.Config{Hook: testhook.From(ctx)}) // a crash test's hook, if ctx carries one
	if err != nil {
		return Counts{}, err
	}
	defer func() { err = errors.Join(err, saver.Close()) }()
	db := saver.DB()
	tracker, err := OpenTracker(ctx, db, cfg.Now, cfg.Latency)
	if err != nil {
		return Counts{}, err
	}
	outbox, err := OpenOutbox(ctx, db, cfg.Now)
	if err != nil {
		return Counts{}, err
	}
	led, err := ledger.NewSQL(ctx, db, ledger.Options{Fence: saver}) // fenced by the thread's lease (D17)
	if err != nil {
		return Counts{}, err
	}
	tools, err := Tools(tracker, outbox, cfg.Timeout)
	if err != nil {
		return Counts{}, err
	}
	log := &demo.DecisionLog{}
	ex, err := nodes.NewExecutor(tools, nodes.WithLedger(led), nodes.WithLogger(log.Logger()))
	if err != nil {
		return Counts{}, err
	}
	agent, err := newAgent(scripts(), ex)
	if err != nil {
		return Counts{}, err
	}
	opts := []graph.Option{graph.WithSaver(saver), graph.WithName(GraphName)}
	if cfg.Lease > 0 {
		opts = append(opts, graph.WithLeaseTTL(cfg.Lease))
	}
	r, err := agent.Compile(opts...)
	if err != nil {
		return Counts{}, err
	}

	p := demo.NewPrinter(cfg.Out)
	p.Printf("lockstep escalation on %s (offline: a scripted model, a fake issue tracker in table tracker_issues, an outbox in escalation_outbox)\n", cfg.DB)
	play := func(thread, ask, setting string) error {
		p.Printf("\nThread %s: %q\n", thread, ask)
		snap, err := r.GetState(ctx, thread)
		switch {
		case errors.Is(err, graph.ErrThreadNotFound):
			p.Printf("  %s\n", setting)
			mark := len(log.Events())
			if _, err := r.Invoke(ctx, thread, graph.Set(nodes.AgentState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: ask}}}, "Messages")); err != nil {
				return err
			}
			for _, e := range log.Events()[mark:] {
				p.Printf("    %-17s %-9s%s\n", e.Tool+":", e.Status, explain(e))
			}
			if snap, err = r.GetState(ctx, thread); err != nil {
				return err
			}
			for _, m := range snap.Values.Messages {
				if m.Role == nodes.RoleTool {
					var obs nodes.Observation
					if json.Unmarshal([]byte(m.Content), &obs) != nil {
						continue
					}
					p.Printf("  Result of %s (%s): %s\n", m.ToolCallID, obs.Status, obs.Result)
					if obs.Note != "" {
						p.Printf("    Note to the model: %s\n", obs.Note)
					}
					var cr Created
					if obs.Status == nodes.StatusExecuted && json.Unmarshal(obs.Result, &cr) == nil && cr.Existing {
						p.Printf("    existing: the attempt that timed out had created #%d; the retry's idempotency key found it.\n", cr.Number)
					}
				}
			}
			p.Printf("  Status %s. Agent: %s\n", snap.Status, demo.LastAnswer(snap.Values.Messages))
		case err != nil:
			return err
		case snap.Status == graph.StatusDone:
			p.Printf("  Already finished (status done): nothing runs again, nothing is filed twice.\n  Agent: %s\n", demo.LastAnswer(snap.Values.Messages))
		default:
			p.Printf("  Found it %s (next %v) after an interrupted earlier run: continuing it.\n", snap.Status, snap.Next)
			res, err := r.Continue(ctx, thread)
			if err != nil {
				return err
			}
			p.Printf("  Status %s. Agent: %s\n", res.Status, demo.LastAnswer(res.Values.Messages))
		}
		return nil
	}
	if err := play(ThreadSlow, askSlow, "The tracker is slow: it creates an issue but answers after "+cfg.Latency.String()+
		", and create_issue times out after "+cfg.Timeout.String()+"."); err != nil {
		return Counts{}, err
	}
	tracker.SetOutage(true)
	if err := play(ThreadOutage, askOutage, "The tracker is down: it answers 503 Service Unavailable to every request."); err != nil {
		return Counts{}, err
	}

	c := Counts{
		Requests: tracker.Requests(), Created: tracker.Creates(),
		Retries:   log.Count("create_issue", nodes.StatusRetry),
		Replayed:  log.Count("create_issue", nodes.StatusReplayed),
		Fallbacks: log.Count("create_issue", nodes.StatusFallback),
	}
	issues, err := tracker.Issues(ctx)
	if err != nil {
		return c, err
	}
	c.Issues = len(issues)
	if c.Queued, err = outbox.Len(ctx); err != nil {
		return c, err
	}
	p.Printf("\ntracker_issues holds %d issue(s)", c.Issues)
	for i, is := range issues {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		p.Printf("%s#%d %s", sep, is.Number, is.URL)
	}
	p.Printf("; escalation_outbox holds %d. This run: the tracker got %d request(s) and created %d issue(s).\n", c.Queued, c.Requests, c.Created)
	return c, p.Err()
}

// explain says in words what a decision means here.
func explain(e demo.Decision) string {
	switch e.Status {
	case nodes.StatusRetry:
		return "attempt " + e.Attrs["attempt"] + " failed (" + e.Attrs["error"] + "); retrying with the same idempotency key"
	case nodes.StatusExecuted:
		if e.Attrs["attempts"] != "" && e.Attrs["attempts"] != "1" {
			return "after " + e.Attrs["attempts"] + " attempts"
		}
		return "first attempt"
	case nodes.StatusReplayed:
		return "answered by the ledger: it already happened, the tracker was not called"
	case nodes.StatusFailed:
		return "retries used up"
	case nodes.StatusFallback:
		return "its fallback " + e.Attrs["fallback"] + " runs instead"
	}
	return ""
}
