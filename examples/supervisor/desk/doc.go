// Package desk is the supervisor example of lockstep: the support
// scenario rebuilt as a supervisor graph with two sub-agents, each a
// compiled agent graph run as a node of the supervisor
// (graph.AddSubgraph with graph.SubgraphMap).
//
// It shows:
//
//   - subgraphs: the supervisor's state is a Case; the triage and billing
//     nodes each run a nodes.Agent (model ⇄ tools) over its own
//     conversation, mapped from the case and back;
//   - routing: triage's answer names the team; the supervisor routes the
//     case to billing;
//   - an approval inside a subgraph: billing's refund tool is destructive,
//     so the billing agent's call waits for a human; the whole thread
//     waits, the approval inbox lists the request of the nested task, and
//     the approval worker resumes the thread by the request's ID from the
//     root, which reaches the billing subgraph: only its tool node runs
//     again, never triage, and the refund happens exactly once;
//   - a fake payments service whose refunds live in their own table
//     (supervisor_refunds) of the lockstep database file, deduplicated by
//     the idempotency key the executor hands it (unique per subgraph task).
//
// The models are scripted, so the example runs offline. Run is the whole
// story; the command examples/supervisor calls it.
package desk
