// Package ledger records side-effecting tool calls so that each logical
// operation happens once (docs/architecture.md#d11; Stripe's idempotency semantics).
//
// A caller derives a deterministic idempotency key for the operation (see
// package nodes), then:
//
//  1. Begin records the intent under the key, with a fingerprint of the
//     arguments (their approval.ArgsHash) and a lease. If the key is new, or
//     its record is older than the retention, the caller holds the intent
//     (started is true) and runs the operation.
//  2. After the call, Complete stores the outcome: the result, or a
//     permanent failure. A transient failure is not stored: Release clears
//     the intent so that a retry runs again with the same key.
//
// Begin on a key that already has a record returns:
//
//   - the pending intent again (started true, its lease renewed) when the
//     record's owner is the caller: a caller whose Begin failed with an
//     error that may have come after the commit (an I/O error at COMMIT)
//     calls Begin again with the same owner to learn that it holds the
//     intent, instead of leaving an intent nobody holds;
//   - the stored outcome (State done, started false): the caller replays it
//     and says that the operation already happened;
//   - a *KeyReuseError (ErrKeyReuse) when the record's tool or fingerprint
//     differs: the same key was used for a different operation;
//   - an *InProgressError (ErrInProgress) while another holder's lease is
//     live and the holder may be alive: a concurrent duplicate. It is a
//     passing condition, never the operation's outcome: retry after its
//     LeaseUntil, or wait;
//   - an *OutcomeUnknownError (ErrOutcomeUnknown) when the holder is gone
//     with no outcome: its lease expired (the process crashed between the
//     effect and its record, or lost the ledger), or, at once, when it was
//     an earlier run of the caller's graph thread (EarlierRun, see below).
//     The operation must not run again until someone decides: Resolve
//     records the outcome found downstream, Forget drops the record (the
//     operation may run again), or a Begin with TakeOver set (after a
//     reconcile found no effect, a human decided to run it again, or the
//     service dedupes by the key) takes the intent over.
//
// A caller inside a graph run that holds its thread's lease names the run
// in Intent.Thread and Intent.Run. Only one run holds a thread's lease at a
// time, and it is the successor of every earlier run of the thread: a
// pending intent recorded by another run of the same thread belongs to a
// run that has ended or lost the thread (killed, stopped with Ctrl-C, or
// paused past its lease) and will never record its outcome, so it counts
// as abandoned at once, however long its lease. An intent of another
// thread's run, of the same run, or recorded without a run is judged by
// its lease alone.
//
// Records expire Retention (default 24 h) after they were created: Begin
// treats an expired done record as absent, and Prune deletes them. Pending
// records are never pruned, so an unknown outcome cannot be forgotten by
// the clock.
//
// ClaimMessage deduplicates redelivered messages (R44). A Claim names the
// message by its Scope (where the sender keeps IDs unique: a tenant and a
// channel, joined with MessageScope), its ID, and a Fingerprint of its
// payload (MessageFingerprint; the payload itself is never stored). The
// first claim of an ID in a scope wins; a later one with the same
// fingerprint is a redelivery, ErrDuplicateMessage; a later one with
// another fingerprint is an ID reused for a different message,
// *DuplicateMismatchError (ErrDuplicateMismatch), which does not match
// ErrDuplicateMessage. Neither writes anything. The same ID in two scopes
// is two messages. Scopes, IDs and fingerprints compare as exact bytes
// (no case folding or trimming); an empty or oversized one is ErrInvalid.
// Claims expire after the retention like records.
//
// A claim made with ClaimMessage commits on its own, so a process that
// dies between the claim and the work the message asks for has claimed a
// message it never handled, and the redelivery is refused. When the work
// is recorded in the same database, claim with SQL.ClaimMessageTx inside
// the transaction that records it (say, the row that starts the thread the
// message asks for): both commit, or neither.
//
// # Fenced by the thread's lease
//
// A SQL ledger opened on the checkpoint saver's database and fenced by it
// (Options.Fence: the SQLite saver whose DB it is opened on) begins,
// completes and releases the intents of a leased graph run (Intent.Thread
// and Intent.Run set) only in a transaction of the saver that checks that
// the run still holds the thread's lease (checkpoint.Joiner's Fenced): a
// run that lost its thread gets an error matching checkpoint.ErrThreadBusy
// and writes nothing, so that it neither starts a call its successor owns
// nor records what its successor must reconcile (D17). Its CompleteJoin
// records an outcome in the transaction of the saver's write that saves
// the call's result (graph.JoinWrite), so that the outcome and the result
// land together or not at all (D16); package nodes' executor uses it
// inside a durable step, as the tool node runs every call. Resolve,
// Forget, Get, Prune and message claims are not fenced. The Memory ledger
// cannot be fenced (NewMemory refuses a Fence).
//
// The SQL tables are versioned (SchemaVersion); NewSQL upgrades the tables
// of an older version in place, in one transaction. Message claims made
// before version 2 had no scope or fingerprint: they still refuse their ID,
// in every scope, as ErrDuplicateMessage until they expire.
//
// # Stored rows
//
// The SQL ledger reads every row as strictly as it wrote it (see Ledger):
// a record or message claim that was damaged, edited, or copied from
// another key is a *CorruptError (ErrCorrupt) naming the key, and nothing
// is written on it; the tool node then neither runs the call nor replays
// an outcome. Forget removes a corrupt record. A row's checksum (schema
// version 4, column crc) is a CRC-32C, stored as a non-negative INTEGER,
// of a domain name and then the row's columns in the order below, the key
// first. The domain and every TEXT column are written as the byte 'b',
// the length in bytes as an unsigned LEB128 varint, and the bytes; an
// INTEGER as 'i' and its eight bytes, big-endian; a NULL as 'n':
//
//	lockstep_ledger    "lockstep/ledger/record/v1", key, tool, args_hash, state, result, failure,
//	                   owner, lease_until, created_at, completed_at, thread_id, run_id
//	lockstep_messages  "lockstep/ledger/claim/v1", scope, id, fingerprint, claimed_at
//
// An operator who edits a row on purpose recomputes its checksum; the row
// is still decoded strictly and checked (Entry.Verify). Opening a database
// of version 3 or older computes the checksums of its rows once, in the
// upgrade's transaction, so a row damaged before that upgrade is caught
// only by the strict decoding. Code that knows only version 3 refuses a
// database of version 4 (ErrSchemaVersion) and leaves it unchanged.
//
// Two implementations ship: NewMemory, and NewSQL over a *sql.DB (the
// database file of the checkpoints; this package imports no driver). Both
// are safe for concurrent use; the SQL one also across processes.
//
// Nothing secret is stored: a record holds the key, the tool name, the
// argument fingerprint (a hash, never the arguments), and the outcome the
// caller passes, which package nodes redacts first; a message claim holds
// the scope, the ID and the payload's fingerprint. Errors name keys, scopes
// and IDs, never arguments or payloads.
package ledger
