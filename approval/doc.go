// Package approval gates the one-way doors of an agent behind durable human
// decisions.
//
// A gated tool call pauses its run with a [Request] as the interrupt value,
// so the request is saved in the same transaction as the pause and its ID is
// the interrupt's ID. A reviewer's [Decision] is the answer the run resumes
// with. [Rules] decide deterministically which calls need a human.
//
// # The parts
//
//   - [Rules] and [Request]: which calls are gated, and what the tool node
//     asks (package nodes raises the request with interrupt.Ask and acts on
//     the decision).
//   - [Inbox]: the pending approvals of all threads, read from the saver's
//     pending interrupts ([checkpoint.InterruptLister]) and filtered, paged
//     and oldest first; decisions on them; [Inbox.Sweep] for expiry.
//   - [Store] ([MemoryStore], [SQLStore]): the decisions, one per approval
//     ID, ever; the worker's progress; what ran ([OutcomeRecorder.RecordOutcome]); the
//     audit trail ([Store.Audit]).
//   - [Worker] with a [ResumeFunc] ([ResumeGraph]): resumes the threads of
//     decided approvals, so the process that records a decision need not
//     hold the graph.
//   - [Wait] over a [Channel]: the synchronous form, waiting in process for
//     a reply instead of pausing the graph.
//
// A request has no table of its own: while its thread waits, the
// checkpoint holds it. A decision is a row of its own, keyed by the
// approval ID.
//
// # Deciding
//
// A [Verdict] (approve, reject, or edit with new arguments) becomes a
// Decision under these rules, the same for every Store and for Wait:
//
//  1. The outcome is exactly "approved", "rejected" or "edited"
//     ("APPROVE", "yes" and "" are refused). Expired is the system's.
//  2. The reviewer is named: non-empty, valid UTF-8 without control,
//     format or invisible characters (zero-width spaces, direction
//     marks), at most [MaxReviewerBytes], and not starting with
//     [SystemPrefix] in any case or width (names like "system:expiry" and
//     "ＳＹＳＴＥＭ:expiry" are the system's and are refused for humans).
//     The note is at most [MaxNoteBytes].
//  3. The request is well formed ([Request.Validate]): its ArgsHash
//     matches its arguments, so the decision covers exactly the call that
//     was shown.
//  4. The request has not expired: now >= ExpiresAt means expired, by the
//     store's clock, whether or not a sweeper ran. A verdict 1 ns late
//     fails with [ErrExpired], and records the expiry (see Expiry).
//  5. An edit keeps the tool and its arguments match the JSON Schema stored
//     in the request; the decision's ArgsHash covers the edited arguments.
//     The tool node evaluates the gate again for the edited call. Edited
//     arguments that fail the schema are refused with every problem at
//     its JSON path ([Error].Problems), not only the first.
//  6. First wins: exactly one decision per approval ID is ever recorded.
//     Every other attempt fails with an [*AlreadyDecidedError] that names
//     the winner and what was decided, and changes nothing. Decisions
//     never change.
//
// Refused verdicts change nothing, except that a late one records the
// expiry it observed. Every decision records the reviewer,
// the time, the note, the edited arguments if any, and a snapshot of the
// request as it was shown (tool, arguments and hash, rationale, context,
// risk, rule, owner, created and expires) with its thread and checkpoint.
//
// # No self-approval
//
// Only code holding a [Store] or an [Inbox] can decide, and only under a
// reviewer's name. Neither is reachable from the model or a tool: they are
// operator-side APIs for the process that serves reviewers (a CLI, a web
// page) and for the [Worker], and must never be passed to a tool or put in
// graph state. The tool node gets an [OutcomeRecorder], which records what
// ran and cannot decide. The model's only channel is a tool call, and a
// gated call produces a request, never a decision. Application code that
// serves reviewers is responsible for authenticating them: the reviewer
// string is recorded as given.
//
// # Expiry
//
// A request expires at its ExpiresAt ([Rules.TTL], 24h by default, at
// most [MaxTTL]). Expiry means reject-and-escalate, never approve, and it
// is a recorded, one-way transition: the first to see a request expired
// records an Expired decision by [ExpiryReviewer], first-wins against
// racing reviewers, whose note tells the model to escalate to the owner
// rather than retry. Seeing it is any of: a verdict that arrives late
// ([Store.Decide], [Inbox.Decide] and its Approve, Reject and Edit: the
// verdict is refused with [ErrExpired] and the expiry recorded),
// [Inbox.Get] (ErrExpired), [Inbox.List] (the expired request is not
// listed; [Page].Expired counts it) and [Inbox.Sweep] (which also expires
// requests that can never be decided). From then on nothing moves the
// request out of expired: a clock that steps back (an NTP step) finds the
// decision recorded (rule 6), the [Worker] resumes the thread with the
// expiry, and the tool node does not run an approved call when the store
// it reports to holds another decision for it, such as the expiry (see
// nodes.WithOutcomeRecorder). An Inbox reads time from its store
// ([Store.Now]), so what it lists as pending is what the store lets a
// reviewer decide.
//
// # Clocks
//
// Every time that is stored and later compared with "now" is stamped by
// the clock that compares it, so that two clocks can never disagree about
// it:
//
//   - The store's clock (the now of [NewMemoryStore] and [OpenSQLStore])
//     stamps decisions, resume claims ([WorkerOptions].Lease), retries
//     ([WorkerOptions].Retry), finished resumes and outcomes, and
//     judges expiry. An [Inbox] and a [Worker] have no clock of their
//     own: they read the store's, or hand it durations.
//   - The tool node's clock (nodes.WithNodeClock) stamps a request's
//     CreatedAt and ExpiresAt, which the store's clock judges: give both
//     the same clock. Across processes, that is the machines' wall clocks,
//     which must agree.
//   - The checkpoint saver's clock (sqlite.Config.Now,
//     checkpoint.NewMemorySaver) stamps and judges the threads' leases
//     (graph.WithLeaseTTL), and the ledger's (ledger.Options.Now) its
//     intents' leases: each is given a duration and stamps it itself.
//   - [WaitOptions].Now stamps the decisions of [Wait] and judges expiry
//     there; nothing is stored.
//
// A clock moved on purpose (a demo that lets a request expire without
// waiting) must not be one that stamps leases or retries that another
// process reads: they would be in that process's future.
//
// # Resuming
//
// The [Worker] lists decided approvals whose thread was not resumed
// ([Store.Unresumed]), claims one at a time ([Store.ClaimResume], a lease
// that lapses if the worker dies and is handed back if it is stopped),
// and calls its [ResumeFunc] with the decision. Over a [ResumeClaimer]
// (MemoryStore, SQLStore) a claim names its holder, the worker's name
// ([WorkerOptions].Name) and the claim's own ID, and a worker takes back
// at once the claims of its name that none of its attempts holds: those
// a killed process of the same name left (SIGKILL, a crash) are resumed
// when it runs again, not after the lease. The store takes a claim back
// only while that very claim holds the approval, and a worker never
// names a claim one of its attempts holds, so no decision is resumed by
// two workers at once; what it needs is that no two workers that run at
// the same time share a name (the default name is random per Worker). The worker has no clock:
// it passes the store durations (the claim's lease, a retry's backoff),
// and the store stamps them on its own clock, the one that later compares
// them, so no stored time comes from another clock. It marks the approval resumed when the call returned nil, or
// an error showing the thread no longer waits on it (the runtime's
// ErrAlreadyAnswered, ErrUnknownInterrupt, ErrNothingToResume,
// ErrThreadNotFound); a busy thread (checkpoint.ErrThreadBusy,
// ErrConflict) or any other failure is retried with backoff. A crash after
// the decision was recorded and before the thread resumed leaves the
// decision unresumed, so a worker resumes it after the restart; the
// runtime's first-wins resume (a second resume of one interrupt fails
// before any node runs) makes it happen once. Resume threads only through
// the worker, so that the answer a thread receives is the recorded one.
//
// A Worker whose store is a [Consumer] (an SQLStore on the SQLite
// saver's database, or the Postgres store beside its saver) consumes by
// default: [ResumeGraph], on a graph whose saver is a checkpoint.Joiner,
// consumes the approval in the transaction of the save that carries its
// decision into the thread ([Trail].Consumed), as [ResumeGraphConsuming]
// does whatever the worker. After a crash at any point it is consumed
// exactly when the thread holds the answer, and a run that lost its
// thread (paused past its lease while another runner took over) consumes
// nothing: its save is refused with checkpoint.ErrThreadBusy (DESIGN D16,
// D17). A store on another database makes every such resume fail with
// checkpoint.ErrNotJoinable rather than consume unfenced, and Worker.Run
// stops with it: open the store on the saver's database, or opt out with
// [WorkerOptions].NoConsume. Over a MemoryStore (no Consumer) or a
// MemorySaver (no Joiner) the thread's first-wins resume is what keeps a
// decision from being delivered twice.
//
// # Audit
//
// [Store.Audit] returns an approval's [Trail]: who decided what and when,
// the request as shown, how and when the thread was resumed (and failed
// attempts), and what ran: the idempotency key, the arguments hash (which
// must equal the decision's, else [ErrArgsMismatch]) and the result, as
// recorded by the tool node with [OutcomeRecorder.RecordOutcome].
//
// # Waiting in process
//
// [Wait] serves flows that cannot pause (a synchronous chat turn). It
// subscribes to the reply before it publishes the request, so an
// immediate reply is not lost; it bounds the wait (a timeout is an Expired
// decision: a rejection); and it returns a [*ChannelError] when the
// channel itself fails, which aborts the turn. [MemoryChannel] is an
// in-process channel; adapters for message buses implement [Channel].
//
// # Approval fatigue
//
// A reviewer who sees fifty requests a day approves the fifty-first without
// reading it, and then the gate protects nothing. Keep the gated list
// short:
//
//   - Gate one-way doors only: money moved, data deleted, messages sent
//     outside, permissions granted. Reads and reversible writes run
//     ungated; declare their risk honestly so that [Rules.MinRisk] (high
//     by default) leaves them alone.
//   - Express thresholds as [ArgRule] values (a refund above a limit, an
//     email to an outside domain) instead of raising a whole tool's tier.
//   - Route requests to the people who can judge them ([Rules.Owners]) and
//     give them what they need to decide ([Request.Context]: customer,
//     order, history), so each review is quick and real.
//   - Let expiry say no. An unanswered request is rejected and escalated,
//     never approved, so a short TTL costs a retry, not an incident.
//   - Watch the numbers: a tool approved nearly every time, unedited,
//     should be made safe (a limit, an undo) and ungated; one rejected
//     nearly every time should not be offered to the model.
//
// # Storage
//
// [SQLStore] keeps its tables next to the checkpoints, in the SQLite file
// of the saver, created if they do not exist and versioned in
// approval_schema ([SchemaVersion]). approval_decisions holds one row per
// decision (primary key: the approval ID), with the request snapshot as
// JSON text and times as UTC text, readable with the stock sqlite3 shell;
// approval_executions holds what ran. This package imports no SQLite
// driver: it uses database/sql on the *sql.DB it is given.
//
// Every row is checked when it is read (see [Store]): a row that was
// damaged, edited, or copied from another approval is a [*CorruptError]
// naming the approval, and nothing is written on it. A row's checksum
// (schema version 2) is a CRC-32C, stored as a non-negative INTEGER, of a
// domain name and then the row's columns in the order below, the approval
// ID first. The domain and every TEXT column are written as the byte 'b',
// the length in bytes as an unsigned LEB128 varint, and the bytes; an
// INTEGER as 'i' and its eight bytes, big-endian; a NULL as 'n':
//
//	approval_decisions.crc         "lockstep/approval/decision/v1", id, thread, checkpoint, tool,
//	                               owner, outcome, reviewer, note, args, args_hash, decided_at, request
//	approval_decisions.resume_crc  "lockstep/approval/resume/v1", id, resumed_at, resume_note,
//	                               resume_attempts (INTEGER), resume_error, resume_not_before,
//	                               then resume_claimant, resume_claim only when either is set
//	approval_executions.crc        "lockstep/approval/execution/v1", approval_id, idempotency_key,
//	                               args_hash, result, error, recorded_at
//
// An operator who edits a row on purpose recomputes its checksum; the row
// is still decoded strictly and checked against its request. Opening a
// database of version 1 computes the checksums of its rows once, in the
// transaction that records version 2, so a row damaged before that
// upgrade is caught only by the strict decoding. A build that knows only
// version 1 refuses a database of version 2 ([ErrSchemaVersion]) and
// leaves it unchanged. Version 3 adds resume_claimant and resume_claim
// (the holder of a resume claim, empty in the rows it upgrades, whose
// checksums stay valid as they are).
//
// # Concurrency
//
// [MemoryStore], [SQLStore], [Inbox], [Worker] and [MemoryChannel] are
// safe for concurrent use; SQLStore also across processes sharing the
// database.
//
// # Errors
//
// Refusals are [*Error] values matching one sentinel each: [ErrNotFound],
// [ErrExpired], [ErrInvalidDecision], [ErrInvalidArgs], [ErrInvalidRequest],
// [ErrInvalidExpiry], [ErrInvalidFilter], [ErrNotApproved],
// [ErrArgsMismatch], [ErrOutcomeRecorded], [ErrInvalidConfig] for a
// configuration out of range ([Rules.Validate], [NewWorker],
// [WaitOptions], a claim's lease: a zero value means the default, and no
// other value is ever replaced by it), and [ErrClosed] for any call on a
// closed store (or a SQLStore whose database was closed). A lost race is an
// [*AlreadyDecidedError] (matching [ErrAlreadyDecided], and [ErrExpired]
// when the sweeper won). A failed confirmation channel is a [*ChannelError]
// (matching [ErrChannel]; a closed [MemoryChannel] says
// [ErrChannelClosed]). Tables newer than this build give
// [ErrSchemaVersion]. A stored row that does not verify is a
// [*CorruptError] (matching [ErrCorrupt]) naming the approval and the row.
// Storage failures are wrapped with %w. Messages name
// the approval ID and never carry arguments, notes or context. Match
// errors with errors.Is and errors.As.
package approval
