// Package lockstep is a library for agents that change the world safely:
// typed state graphs that run in supersteps, checkpoint to SQLite after
// every one, pause for a human without losing their place, and resume
// without running a committed write, or an approved side effect, twice.
//
// The packages, from the core outwards:
//
//   - retry: the one retry policy (attempts, backoff, jitter) graph
//     nodes, tool calls and the approval worker take.
//   - interrupt: how a node pauses for an answer (Ask, NodeInterrupt).
//   - checkpoint: the Saver interface, its records and rules, and an
//     in-memory saver; checkpoint/sqlite is the durable one.
//   - graph: the builder, the superstep runner, snapshots and history,
//     streaming and Mermaid drawings.
//   - nodes: the safe tool executor (confirmation gate, memo, idempotency
//     ledger, classified retries, fallback) and the langchaingo LLM node.
//   - approval: durable human approvals with expiry and audit.
//   - cmd/lockstep: a CLI to inspect paused work and decide approvals.
//
// This root package holds no code; its tests are the end-to-end example
// (graph_test.go) and the fixed benchmarks (bench_test.go). The system
// tests (crash and kill loops, the soak, bad inputs, golden files) live
// under internal/systemtest.
package lockstep
