// Package postgres is lockstep on PostgreSQL: the checkpoint saver
// ([Saver], which also keeps the due work and queued input of package
// workers), the approval store ([ApprovalStore]) and the idempotency
// ledger ([Ledger]) on one pgx connection pool ([DB], from [Open]), for
// many processes and machines sharing one database. It is the only
// package of the module that imports github.com/jackc/pgx; package graph
// imports neither it nor a SQLite driver.
//
//	db, err := postgres.Open(ctx, "postgres://app@db.internal:5432/agents", postgres.Config{})
//	...
//	defer db.Close()
//	r, err := g.Compile(graph.WithSaver(db.Saver()))
//	ex, err := nodes.NewExecutor(tools, nodes.WithLedger(db.Ledger()))
//	inbox := approval.NewInbox(db.Saver(), db.Approvals())
//
// # Contract
//
// The three stores keep the rules of their packages exactly as the
// in-memory and SQLite ones do, and are checked by the same suites:
// checkpointtest for the saver (every group but Vacuumer: PostgreSQL's
// autovacuum gives space back on its own), approvaltest for the approval
// store and ledgertest for the ledger. What a backend cannot do is a typed
// error, never a silent difference:
//
//   - JSON columns are JSONB, which keeps a document's value but neither
//     its key order, its spacing, its escapes nor the spelling of its
//     numbers (1e2 reads back as 100): values read back as the same JSON
//     value in JSONB's spelling. Checkpoint metadata, whose numbers come
//     back with their text (checkpoint.Metadata), keeps that text in
//     metadata_text when JSONB would respell one. Approval decisions'
//     edited arguments and recorded results are canonical JSON when
//     written and are read back canonical, so they come back byte for
//     byte.
//   - What JSONB or PostgreSQL's text cannot hold is refused with an
//     error matching ErrUnsupported (and checkpoint.ErrInvalid, or the
//     store's invalid-input error), writing nothing: a string holding
//     U+0000, a negative zero (JSONB has no -0), and, in the ledger, keys,
//     scopes and message IDs holding a NUL byte or invalid UTF-8 (the
//     SQLite ledger stores any bytes).
//   - Times are stored as the SQLite stores store them: checkpoint and
//     approval times as RFC 3339 text with nine fraction digits, lease and
//     ledger times as Unix nanoseconds, so they come back exact.
//   - Text columns use the "C" collation, so IDs compare and sort as Go
//     strings do, whatever the database's locale.
//
// # Integrity
//
// Every row of checkpoints, blobs, writes, approval_decisions (two:
// the decision and its snapshot, and the worker's progress),
// approval_executions, ledger and messages carries a checksum (crc, an
// MD5) over its key and every column, with each JSONB column as
// PostgreSQL prints it, computed by the database when the row is written
// (the schema's crc function) and checked by the store when it reads the
// row; every update of an approval or ledger row also checks it in its
// WHERE clause, so that nothing is written on a row that does not verify. JSONB's rewriting therefore never fails it, while a row edited by
// hand (a value changed in psql) or copied under another key (another
// thread's write) reads as a *checkpoint.CorruptError naming thread and
// checkpoint, never as another value. What a checksum cannot see, a row
// edited and re-checksummed, is then checked as the SQLite saver checks
// it: strictly decoded metadata and versions, checkpoint.VerifyTuple and
// VerifyStep for checkpoints; approval.ParseRequest, Record.Verify and
// Trail.Verify for approvals; ledger.DecodeFailure and Entry.Verify for
// the ledger. A row that fails is an *approval.CorruptError or a
// *ledger.CorruptError naming the approval or the key, from every read
// and every write on it; ledger.Ledger.Forget still deletes it. A
// topology's data must hash to its fingerprint.
//
// # One writer per thread, one round trip per step
//
// The threads row holds a namespace's head and, on the root row, the
// thread's one lease (owner, runner, epoch, until), which every namespace
// shares: a write in a subgraph's namespace runs in a transaction that
// locks the root row, checks the lease rule there and takes the lease
// there. A Put is one statement: it updates the threads row only
// where the head is the new checkpoint's parent and the lease rule lets
// the owner in (READ COMMITTED re-checks the row after any concurrent
// update, so two writers can never both pass), and inserts the checkpoint
// row, its blobs and the writes of its tasks only when it did. A chain of
// checkpoints (checkpoint.ChainPutter) is a pgx batch of such statements,
// committed as one implicit transaction: a superstep commits in one round
// trip. PutWrites and Claim are one statement each. When a statement
// finds a rule broken, it writes nothing, and the saver reads the thread
// to say which rule: a *checkpoint.ConflictError or *checkpoint.BusyError.
// A write with interrupt writes runs in a transaction that locks the
// thread's row first, to check their interrupt IDs against those saved.
// Get is one statement (a recursive query walks append chains); List one
// repeatable-read transaction.
//
// # Group commit
//
// When many runs write at once, a Put, PutChain or PutWrites that needs
// no transaction of its own (the root namespace, no interrupt writes, no
// joins) and arrives while half the pool's connections (at least one)
// are already sending write batches waits, and the next caller to get a
// connection sends every waiting write's statements in one batch: one
// round trip and one transaction (one WAL flush) for all of them,
// bounded by Config.GroupCommitMax writes and Config.GroupCommitBytes.
// A lone write is never delayed; nothing waits for company. Each write
// keeps its own result: one the rules refuse matches no row, writes
// nothing and fails alone while the others commit; when PostgreSQL
// refuses a statement (a value it cannot hold), the batch rolls back and
// each write runs again alone, so that only its own write fails. The
// statements go in the order of their thread IDs, so that concurrent
// batches take the threads' rows in one order. A crash before the commit
// loses the whole batch, after it none of it. Saver.GroupStats counts the
// batches. GroupCommitMax 1 turns it off.
//
// # Fencing
//
// A write carrying checkpoint.Lease.Held commits only while the thread's
// lease is still its owner's at the epoch it took it (live, or lapsed with
// nobody having taken it since): the graph runtime sets it on every write
// of a run after its first, so a runner that was paused past its lease
// and lost the thread is refused before any of its writes lands (DESIGN
// D17), with a *checkpoint.BusyError naming who holds the thread now.
//
// The Saver is a checkpoint.Joiner, so the three stores of one DB share
// transactions where exactly-once depends on it (D16): a request with
// Joins runs in a transaction (the thread's row locked, as for interrupt
// writes) in which, once its statements wrote, the joins run before the
// commit; Saver.Fenced runs work after checking the thread's lease with
// its row locked FOR UPDATE. ApprovalStore.Consumption (table
// approval_consumptions, schema 5) consumes an approval in the save that
// carries its decision (an approval.Worker on the DB's Approvals does it
// by default, see approval.ResumeGraph); the Ledger is fenced by the DB's
// Saver by default (ledger.Options.Unfenced turns that off): it begins,
// completes and releases a leased run's intents only while the run holds
// the thread's lease, and its CompleteJoin records an outcome with the
// write that saves the call's result. The transaction handed to a
// Join is this package's own: only this DB's stores run in it, and theirs
// refuse another DB's with checkpoint.ErrNotJoinable.
//
// # Workers
//
// The saver keeps due work and queued input (checkpoint.DueWork and
// checkpoint.InputQueue), so that a pool of workers (package workers) in
// any number of processes on any number of machines shares the threads of
// one database with no coordinator. ClaimDue is one statement that locks
// the due threads' rows FOR UPDATE SKIP LOCKED: workers claiming at the
// same moment skip each other's rows instead of waiting for them, and
// READ COMMITTED re-checks a row another worker claimed and committed
// since the statement began, so no thread is ever claimed twice. A claim
// takes the thread's lease (its epoch grows, fencing every write of an
// earlier run, see Fencing) and marks the thread due until its claimer
// settles it: a worker that dies leaves its threads due once their leases
// lapse. Settle locks the row and writes only while the claim is still
// the thread's (checkpoint.ErrClaimLost otherwise); Hold and Settle are
// one transaction each, Enqueue one round trip that locks the thread's
// row first, so a thread's inputs are numbered in the order they commit.
//
// # Migrations
//
// The tables live in one PostgreSQL schema (Config.Schema, "lockstep" by
// default), versioned in its schema_version table (SchemaVersion). Open
// creates or migrates them in one transaction that first takes a
// transaction-scoped advisory lock on the schema, so that any number of
// processes starting at once run every migration exactly once, and a
// process killed half way leaves the database as it was; the lock is
// released at commit, so it works through PgBouncer in transaction mode.
// A database already current is only read. A schema of a newer lockstep
// (ErrSchemaTooNew), a damaged version table (ErrSchemaInvalid), a schema
// of the same name that another application owns (ErrNotLockstep), a URL
// that is not PostgreSQL's or a server that does not speak its protocol
// (ErrNotPostgres) are typed errors, and nothing is changed. OpenExisting,
// for tools that only inspect a database (the lockstep CLI), never creates
// or migrates anything.
//
// # Connections
//
// Config sets the pool's size and timeouts. Connections idle for more
// than a second are pinged before use, so a server restart costs no run
// more than the statement in flight: a connection that breaks under a
// statement gives a *StoreError matching ErrUnavailable, nothing half
// saved (each write is one statement or one transaction), and the next
// call gets a new connection. A write whose connection broke after it was
// sent matches ErrCommitIndeterminate too: it may have committed, and the
// graph runtime reads the head back to know. No statement relies on
// session state (no SET, no session advisory locks, no LISTEN, no
// temporary tables), and no batch or pipeline outlives the call that
// sends it, so nothing is held across a node's execution. Config.PgBouncer
// turns off prepared statements (pgx's QueryExecModeExec) for PgBouncer
// in transaction mode; Config.ExecMode picks another mode (the simple
// protocol, for instance).
//
// # Tables
//
// In the schema (Config.Schema), readable with psql:
//
//	threads      one row per thread and namespace that has a checkpoint or a lease, and per
//	             thread with due work or queued input
//	  thread_id, checkpoint_ns    the key ("" is the root graph)
//	  head                        the thread's newest checkpoint (NULL: leased, due or queued only)
//	  lease_owner, lease_runner   the run holding the thread and its runner (NULL when free)
//	  lease_epoch                 how many times the lease passed to a new owner; kept on release
//	  lease_until                 the lease's end, Unix nanoseconds (NULL when free)
//	                              (the lease columns are the thread's one lease, on its root row,
//	                              checkpoint_ns = ''; a subgraph's rows leave them NULL)
//	  updated_at                  the last Put or PutWrites, Unix nanoseconds
//	  due_at                      when the thread has work due for a pool of workers (Unix
//	                              nanoseconds on the saver's clock; checkpoint.DueWork): set by a
//	                              claim until it is settled, by queued input, by a retry; NULL:
//	                              none marked (a lease that expired unreleased is due all the same)
//	  due_owner                   the lease owner of the thread's current claim (its token)
//	  due_attempts                failed attempts the last settle recorded
//	  due_parked                  the head the thread's queued input waits behind ('' for no
//	                              checkpoint); NULL when not parked
//	                              (the due columns are on the root row only)
//
//	queued_inputs  input queued for a thread (checkpoint.InputQueue), applied oldest first
//	  input_id                    orders all inputs; never reused
//	  thread_id, run_key          the thread and the input's run key (unique per thread)
//	  input_text                  the input's exact JSON text: {"fields": {<field>: <json>}, "overwrite": [...]}
//	  input                       the same as JSONB, for psql (generated from input_text)
//	  created_at                  RFC 3339, UTC, nine fraction digits
//	  crc                         the checksum of thread_id, run_key, input_text and created_at
//
//	checkpoints  one row per checkpoint
//	  thread_id, checkpoint_ns, checkpoint_id   the key; IDs sort in creation order
//	  parent_checkpoint_id        the checkpoint it was written after (NULL for the first)
//	  step, source                copies of the metadata fields, for SQL
//	  created_at                  RFC 3339, UTC, nine fraction digits
//	  metadata                    JSONB: source, step, parents, run_id, run-key, topology-fp,
//	                              durability-mode (sync, async or exit; absent before lockstep recorded it)
//	                              and caller keys, flat
//	  metadata_text               the metadata's exact JSON when JSONB would spell a number otherwise, else NULL
//	  versions                    JSONB: channel -> version (the ID of the checkpoint that wrote it)
//	  mark                        the breakpoint/resume mark (checkpoint.Checkpoint.Mark)
//	  crc                         the checksum of the row (see Integrity)
//
//	blobs        one row per channel version: what a checkpoint changed
//	  thread_id, checkpoint_ns, channel, version   the key (version: the checkpoint that wrote it)
//	  kind                        'value' (the whole value) or 'append' (the items appended)
//	  base                        for an append, the version it extends ('' for the empty value)
//	  value                       JSONB: the value, or the JSON array of appended items
//	  crc                         the checksum of the row
//
//	writes       pending writes: the writes of each task against the checkpoint its step started from
//	  thread_id, checkpoint_ns, checkpoint_id, task_id, idx   the key (idx: checkpoint.WriteIndex)
//	  channel, value              the channel and its JSONB value
//	  node, path                  the task's node and path ("pull" or "push:<n>")
//	  created_at                  when it was first saved, Unix nanoseconds (kept when saved again)
//	  seq                         the order in which writes were first saved (the inbox pages by it)
//	  crc                         the checksum of the row
//
//	approval_decisions   one row per decision (approval.Store), as in approval.SQLStore
//	  id, thread, checkpoint, tool, owner, outcome, reviewer, note, args (JSONB), args_hash,
//	  decided_at, request (JSONB: the request as shown), resumed_at, resume_note,
//	  resume_attempts, resume_error, resume_not_before, crc, resume_crc,
//	  resume_claimant and resume_claim (the worker and the claim that hold the resume,
//	  approval.ResumeClaimer; '' when none)
//	approval_executions  what ran for an approved call
//	  approval_id, idempotency_key, args_hash, result (JSONB), error, recorded_at, crc
//
//	ledger       one row per idempotency key (ledger.Ledger), as in ledger.SQL
//	  key, tool, args_hash, state ('pending' or 'done'), result (JSONB), failure (JSONB),
//	  owner, lease_until, created_at, completed_at (Unix nanoseconds), thread_id, run_id, crc
//	messages     claimed message IDs (ledger.Ledger.ClaimMessage)
//	  scope, id, fingerprint, claimed_at (Unix nanoseconds), crc
//
//	topologies   one row per distinct graph topology (checkpoint.TopologyStore)
//	  fingerprint                 the key, which every checkpoint's metadata names as topology-fp
//	  name                        the graph's name (graph.WithName)
//	  data                        the topology's exact JSON text (its fingerprint hashes these bytes)
//	  topology                    the same as JSONB, for psql (generated from data)
//	  created_at, stored_at       first and last stored, RFC 3339
//	  stored_seq                  the order of the stores of a name: the newest is the largest
//
//	schema_version  one row per applied version: version, app ('lockstep'), applied_at
//
// Version 2 added topologies and the crc columns of the approval and
// ledger tables (approval_decisions.crc and resume_crc,
// approval_executions.crc, ledger.crc, messages.crc), computed once for
// the rows of version 1. Version 3 added the work of a pool of workers
// (the due columns of threads, queued_inputs, and the partial indexes
// claims walk); a thread whose lease expired unreleased is due at once
// after the migration. Version 4 added approval_decisions.resume_claimant
// and resume_claim; the resume checksum covers them only when one is set,
// so the rows of older versions keep theirs.
//
// Every thread's latest checkpoint, with psql:
//
//	SELECT t.thread_id, c.checkpoint_id, c.step, c.source, to_timestamp(t.updated_at / 1e9) AS updated, c.metadata
//	FROM lockstep.threads t JOIN lockstep.checkpoints c
//	  ON c.thread_id = t.thread_id AND c.checkpoint_ns = t.checkpoint_ns AND c.checkpoint_id = t.head
//	WHERE t.checkpoint_ns = '' ORDER BY t.updated_at DESC;
//
// The threads with work due or queued, and how much:
//
//	SELECT t.thread_id, to_timestamp(t.due_at / 1e9) AS due, t.lease_owner, t.due_attempts, t.due_parked,
//		(SELECT count(*) FROM lockstep.queued_inputs q WHERE q.thread_id = t.thread_id) AS queued
//	FROM lockstep.threads t
//	WHERE t.checkpoint_ns = '' AND (t.due_at IS NOT NULL OR t.due_parked IS NOT NULL)
//	ORDER BY t.due_at;
package postgres
