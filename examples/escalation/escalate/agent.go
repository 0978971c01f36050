package escalate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/scripted"
	"github.com/lockstepgo/lockstep/retry"
)

// Default times: a create takes the tracker DefaultLatency to answer, more
// than the tool's DefaultTimeout (the ratio of a 5 s timeout against a
// 6 s answer, scaled down so that the example runs in milliseconds).
const (
	DefaultTimeout = 50 * time.Millisecond
	DefaultLatency = 60 * time.Millisecond
)

// Repository is where the agent files escalations.
const Repository = "payments/checkout"

// systemPrompt is what the agent is told before every turn.
const systemPrompt = "You escalate incidents to the payments team by filing an issue with create_issue. " +
	"If the tracker cannot be reached, tell the user what failed and what happens next."

// IssueArgs are the arguments of create_issue (and of its fallback,
// queue_escalation, which receives the same call).
type IssueArgs struct {
	Repository string `json:"repository" description:"owner/name of the repository" jsonschema:"pattern=^[a-z0-9-]+/[a-z0-9-]+$"`
	Title      string `json:"title" description:"one line saying what is wrong" jsonschema:"minLength=1,maxLength=200"`
	Body       string `json:"body" description:"what was seen, since when, and who reported it" jsonschema:"maxLength=4000"`
	Severity   string `json:"severity" description:"how urgent it is" jsonschema:"enum=low|high|critical"`
}

func (a IssueArgs) issue() NewIssue {
	return NewIssue(a)
}

// Created is create_issue's result.
type Created struct {
	Success        bool   `json:"success"`
	Number         int    `json:"number"`
	URL            string `json:"url"`
	Repository     string `json:"repository"`
	CreatedAt      string `json:"created_at"`
	IdempotencyKey string `json:"idempotency_key"`
	// Existing is set when the tracker found the issue the key created
	// before (a retry after a timeout): nothing new was created.
	Existing bool `json:"existing"`
}

// QueuedResult is queue_escalation's result.
type QueuedResult struct {
	Queued   bool   `json:"queued"`
	OutboxID string `json:"outbox_id"`
	QueuedAt string `json:"queued_at"`
	NextStep string `json:"next_step"`
}

// nextStep is what queue_escalation tells the model to tell the user.
const nextStep = "The escalation is filed automatically when the tracker is back. If it cannot wait, page the payments on-call engineer."

// Tools returns the agent's tool over tracker, with outbox behind it:
// create_issue, a write (through the ledger, retried with the same
// idempotency key) with a per-attempt timeout, and queue_escalation, its
// fallback when the tracker keeps failing.
func Tools(tracker *Tracker, outbox *Outbox, timeout time.Duration) ([]*nodes.Tool, error) {
	queue, err := nodes.NewTool("queue_escalation", "Queue an escalation in the local outbox, to be filed when the tracker is back.",
		func(ctx context.Context, a IssueArgs, env nodes.Env) (QueuedResult, error) {
			q, err := outbox.Add(ctx, a.issue(), env.IdempotencyKey())
			if err != nil {
				return QueuedResult{}, err
			}
			return QueuedResult{Queued: true, OutboxID: q.ID, QueuedAt: q.QueuedAt, NextStep: nextStep}, nil
		},
		// The outbox answers a known key with the escalation it queued, so
		// a run that finds an earlier attempt stopped inside the call runs
		// it again instead of asking a human (this example has nobody to
		// ask).
		nodes.DedupesByKey())
	if err != nil {
		return nil, err
	}
	create, err := nodes.NewTool("create_issue", "File an issue in the issue tracker. Returns its number and URL.",
		func(ctx context.Context, a IssueArgs, env nodes.Env) (Created, error) {
			is, err := tracker.Create(ctx, a.issue(), env.IdempotencyKey())
			var se *StatusError
			if errors.As(err, &se) {
				return Created{}, &nodes.HTTPError{Status: se.Status, Err: err}
			}
			if err != nil {
				return Created{}, err
			}
			return Created{Success: true, Number: is.Number, URL: is.URL, Repository: is.Repository, CreatedAt: is.CreatedAt,
				IdempotencyKey: env.IdempotencyKey(), Existing: is.Existing}, nil
		},
		nodes.Timeout(timeout),
		nodes.DedupesByKey(), // the tracker answers a known key with the issue it made
		nodes.Retry(retry.Policy{MaxAttempts: 3, Initial: timeout / 5, Max: timeout, Jitter: 0.2}),
		nodes.Fallback(queue))
	if err != nil {
		return nil, err
	}
	return []*nodes.Tool{create}, nil
}

// issueArgs are the arguments of the scripted create_issue calls.
const (
	latencyArgs = `{"repository":"payments/checkout","title":"Checkout p95 latency above 2 s since 14:00 UTC","body":"p95 checkout latency has been above 2 s since 14:00 UTC; the error rate is normal. Reported by the on-call bot.","severity":"high"}`
	webhookArgs = `{"repository":"payments/checkout","title":"Refund webhook failing with 500s","body":"The refund webhook has answered 500 to every delivery since 09:12 UTC. Reported by the on-call bot.","severity":"critical"}`
)

// scripts is the model: one script per thread.
func scripts() demo.Scripts {
	return demo.Scripts{
		ThreadSlow: scripted.New(
			scripted.CallTools("Filing the incident in payments/checkout.", scripted.Call("issue-1", "create_issue", latencyArgs)),
			scripted.CallTools("The tracker was slow to answer. Checking that the issue exists, without filing it twice.",
				scripted.Call("issue-2", "create_issue", latencyArgs)).
				Expecting(scripted.ExpectToolResult("issue-1", `"success":true`)),
			scripted.Say("Escalated: the incident is filed in payments/checkout, once. The tracker was slow, so I checked, and the check returned the same issue instead of a duplicate.").
				Expecting(scripted.ExpectToolResult("issue-2", `"status":"replayed"`)),
		),
		ThreadOutage: demo.Branch([]scripted.Turn{
			scripted.CallTools("Filing the incident in payments/checkout.", scripted.Call("issue-1", "create_issue", webhookArgs)),
		}, map[nodes.Status][]scripted.Turn{
			nodes.StatusFallback: {scripted.Say("I could not open the issue: the tracker answered 503 Service Unavailable to all 3 attempts, so nothing was created there. " +
				"I queued the escalation in the outbox instead; it is filed automatically when the tracker is back. If it cannot wait, page the payments on-call engineer now.").
				Expecting(expectAll(scripted.ExpectToolResult("issue-1", "503 Service Unavailable"), scripted.ExpectToolResult("issue-1", `"queued":true`)))},
			nodes.StatusExecuted: {scripted.Say("Escalated: the incident is filed in payments/checkout.")},
			nodes.StatusFailed:   {scripted.Say("I could not open the issue, and could not queue it either. Page the payments on-call engineer now.")},
		}),
	}
}

// expectAll is a scripted Expect that every check passes.
func expectAll(checks ...func([]nodes.Message, []nodes.Definition) error) func([]nodes.Message, []nodes.Definition) error {
	return func(msgs []nodes.Message, tools []nodes.Definition) error {
		for _, c := range checks {
			if err := c(msgs, tools); err != nil {
				return err
			}
		}
		return nil
	}
}

// maxTurns bounds the model calls of one run.
const maxTurns = 6

// newAgent is the prebuilt agent (model ⇄ tools).
func newAgent(m nodes.Model, ex *nodes.Executor) (*nodes.Agent[nodes.AgentState], error) {
	return nodes.NewAgent(m, ex, nodes.AgentOptions{System: systemPrompt, MaxTurns: maxTurns})
}

// GraphName is the name the escalation agent is compiled with
// (graph.WithName): the lockstep CLI tells its versions apart by it.
const GraphName = "escalation"

// Graph returns the agent's graph for drawing (Runnable.Mermaid): its
// tools have no tracker behind them and its model no script, so it must
// not be run. Run builds the graph it runs.
func Graph() (*graph.Graph[nodes.AgentState], error) {
	tools, err := Tools(&Tracker{}, &Outbox{}, DefaultTimeout)
	if err != nil {
		return nil, err
	}
	ex, err := nodes.NewExecutor(tools)
	if err != nil {
		return nil, err
	}
	a, err := newAgent(nodes.ModelFunc(func(context.Context, []nodes.Message, []nodes.Definition) (nodes.Message, error) {
		return nodes.Message{}, fmt.Errorf("escalate: the drawing graph has no model")
	}), ex)
	if err != nil {
		return nil, err
	}
	return a.Graph(), nil
}
