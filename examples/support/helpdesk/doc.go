// Package helpdesk is the support-desk example of lockstep: "find the login
// ticket and close it", asked of an agent with two tools.
//
// It shows:
//
//   - the memo: search_tickets is a read (nodes.Idempotent), so the
//     agent's second identical search is answered from the thread's memo
//     (a cache_hit decision event) and the helpdesk runs it once;
//   - the gate: close_ticket is destructive (nodes.Destructive, high risk),
//     so the agent's call does not run; the thread waits with an approval
//     request (tool, exact arguments, the agent's rationale, risk, owner);
//   - the approval inbox and worker: a named reviewer approves the request
//     in the approval.Inbox, and the approval.Worker resumes the thread
//     with the recorded decision; the helpdesk closes TKT-3 exactly once,
//     and the approval's audit trail records what ran;
//   - a fake helpdesk whose tickets and closes live in their own tables
//     (helpdesk_tickets, helpdesk_closures) of the lockstep database file,
//     deduplicating closes by the idempotency key the executor hands it.
//
// The agent is nodes.NewAgent (model ⇄ tools) with a scripted model, so
// the example runs offline. Run is the whole story; the command
// examples/support calls it, and Graph builds the graph to draw it (the
// lockstep CLI draws the one a thread ran from the database: lockstep
// graph THREAD).
package helpdesk
