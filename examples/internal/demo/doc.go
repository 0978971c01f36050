// Package demo holds what the lockstep examples share but is not part of
// their stories:
//
//   - [Scripts] answers each thread from its own scripted model, so one
//     compiled graph serves every thread of an example (and the approval
//     worker can resume any of them);
//   - [Branch] is a scripted model whose last turns depend on how the last
//     tool call ended (executed, rejected, expired...), so an offline
//     script still tells the truth whatever a reviewer decides;
//   - [DecisionLog] records the executor's "tool decision" events
//     (executed, cache_hit, blocked, replayed, retry, fallback...) for the
//     narrative and the tests;
//   - [Undelivered] says why a decided approval's thread is not resumed
//     yet (an earlier run that was stopped holds its claim, or its last
//     attempt failed), so that a program reports it instead of an answer
//     the thread has not reached;
//   - [Prefix] and [Unresumed] pick an example's own threads, so that
//     several examples can share one database file (their inboxes and
//     workers are limited the same way, with approval.Inbox.ForThreads and
//     approval.WorkerOptions.Threads).
//
// Nothing here is needed by an application built on lockstep; it exists so
// that the examples run offline, deterministically and side by side.
package demo
