// Package escalate is the escalation example of lockstep: an agent that
// files incidents in an issue tracker that is slow, and then down.
//
// It shows:
//
//   - a per-attempt timeout (nodes.Timeout) shorter than the tracker's
//     answer: the first attempt creates the issue but times out, so its
//     outcome is unknown; the executor retries (nodes.Retry) with the same
//     idempotency key (nodes.Env.IdempotencyKey), the tracker
//     deduplicates on it, and exactly one issue exists;
//   - the ledger (nodes/ledger): a second identical create_issue call is
//     answered with the stored result (replayed: it already existed), and
//     the tracker is not called;
//   - a tool result that says what happened: success, issue number, URL,
//     repository, created at and the idempotency key;
//   - an outage: the tracker answers 503 until the retries are used up
//     (nodes.HTTPError classifies 5xx as transient); the tool's fallback
//     (nodes.Fallback) queues the escalation in a local outbox, and the
//     agent gives the user a degraded answer with the diagnosis and the
//     next step;
//   - a fake tracker and an outbox that keep their rows in their own tables
//     (tracker_issues, escalation_outbox) of the lockstep database file.
//
// Times are scaled down so that the example runs in milliseconds: a 50 ms
// timeout against a 60 ms answer has the ratio of 5 s against 6 s. The
// agent is nodes.NewAgent (model ⇄ tools) with a scripted model, so the
// example runs offline. Run is the whole story; the command
// examples/escalation calls it, and Graph builds the graph to draw it (the
// lockstep CLI draws the one a thread ran from the database: lockstep
// graph THREAD).
package escalate
