// Package sqlite is the SQLite checkpoint saver: a [checkpoint.Saver] (and
// ThreadLister, InterruptLister, Pruner and Vacuumer) on one database file,
// built on github.com/mattn/go-sqlite3. It is the only package of the
// module that imports the driver.
//
// # Contract
//
// The saver follows the rules of package checkpoint exactly as
// checkpoint.MemorySaver does, and passes the conformance suite in
// package checkpointtest:
//
//   - Put writes ONE row: the new checkpoint, the data of the channels it
//     changed and the parent's ParentWrites (the writes of the tasks that
//     produced it), in one transaction begun with BEGIN IMMEDIATE; its own
//     Writes (rare: a breakpoint marker) go to the writes table in the same
//     transaction. A crash leaves either the old head or the new one, never
//     part of a step. PutChain (checkpoint.ChainPutter) inserts several
//     Puts' rows in one such transaction: all of them or none.
//   - The head of a thread is its largest checkpoint ID (IDs sort in
//     creation order, and a new checkpoint's ID sorts after its parent's).
//     One writer per thread: Put accepts a checkpoint only when its parent
//     is the head (compare-and-swap; Fork accepts any existing checkpoint,
//     but the new ID must still sort after the head, or the Put is a
//     conflict), and only from the owner of the thread's lease. The loser
//     of a race gets a *checkpoint.ConflictError or a *checkpoint.BusyError
//     and nothing is written. A steady-state Put is a single INSERT that
//     checks both; only when it is refused does the same transaction read
//     the thread to decide which rule applies, and take a free or expired
//     lease (or one its runner takes back, checkpoint.Lease.TakeBack),
//     growing the thread's lease epoch. Saves keep a live lease as it is;
//     Claim renews it (the graph runtime's heartbeat). Lease
//     (checkpoint.LeaseInspector) reads a thread's lease: owner, runner,
//     epoch and end.
//   - Pending writes are keyed by (checkpoint, task, checkpoint.WriteIndex):
//     regular writes are insert-if-absent, so saving twice stores once
//     (also across a reopen); special writes (checkpoint.IsSpecial)
//     replace. A checkpoint's pending writes are its rows of the writes
//     table (saved while it was the head) merged with the task writes of
//     its children, in child order, by the same rule.
//   - Storage is proportional to what nodes write: a row holds only the
//     channels its checkpoint changed, and an append only the new items,
//     naming the version it extends. Get reads the head's row and only the
//     rows of versions the caller does not hold
//     (checkpoint.GetOptions.Have; for an append chain, only the rows
//     after the version held), so reading the latest state costs the size
//     of the state, not the length of the history. List reads the thread's
//     rows with one query and shares the decoded bytes and chain prefixes
//     between the tuples.
//   - Every row carries a CRC-32C (Castagnoli) of everything it holds. A
//     checksum mismatch or JSON that does not decode is a
//     *checkpoint.CorruptError naming thread and checkpoint: stored data
//     never decodes silently to a zero value.
//   - SQLite failures are *StoreError values wrapping the driver's
//     sqlite3.Error: ErrStoreBusy when the database stayed locked for the
//     whole busy timeout (nothing was written; retry), and
//     ErrCommitIndeterminate when COMMIT itself failed (the write may or
//     may not be durable; read the head back, as the graph runtime does).
//     A write is never reported saved unless its COMMIT returned.
//   - A *Saver is safe for concurrent use by many goroutines. After Close,
//     every method fails with an error matching checkpoint.ErrClosed and
//     touches nothing.
//
// # Durability and connections
//
// Open puts every pragma in the data source name, so that each pooled
// connection has it (database/sql has no per-connection setup hook):
// journal_mode=WAL, synchronous, busy_timeout, foreign_keys=on and
// _txlock=immediate (a transaction begun through DB().BeginTx is BEGIN
// IMMEDIATE, so a read-then-write transaction never fails with
// SQLITE_BUSY_SNAPSHOT). New files get auto_vacuum=INCREMENTAL before
// their first page is written, so Vacuum can give pages back.
//
// Synchronous is FULL by default: a commit that returned survives a
// process crash and a power loss. NORMAL is faster (the WAL is synced only
// at checkpoints): a commit that returned survives a process crash,
// SIGKILL included, but a power loss or an operating-system crash can roll
// back the last commits made since the last WAL checkpoint (at most a few
// MiB of WAL). The database is never corrupted, and what is lost is a
// suffix of the history, never a gap: after such a loss a thread's head is
// an older checkpoint (the newest row that survived), and the runtime
// resumes from it. Each checkpoint's data is in its own row, so a
// checkpoint that survived is whole.
//
// The saver writes through one dedicated connection with prepared
// statements, serialised by a mutex; reads use the rest of the pool, in
// parallel with the writer (WAL). A read that needs one statement (a Get
// whose caller holds all but the newest versions, or of a missing thread)
// runs without a transaction; the others run in a read transaction (one
// snapshot). The saver remembers the head of each thread it last wrote
// (a checkpoint, or pending writes that end a run) and has read back since
// (up to 1,024 threads, 256 KiB each), so that reading back a head costs
// one PRAGMA data_version instead of a query; data_version changes
// whenever another connection or process commits to the file, and then
// everything remembered is dropped and read again, so a read is never
// stale. A thread the saver has not written costs nothing extra to read.
// Several processes may open the same file: the SQLite write lock
// serialises them, waiting up to the busy timeout. The file must be on a
// local file system (WAL does not work over a network file system), and
// nothing but SQLite should open it while it is in use.
//
// The WAL is copied back into the database after commits once it holds
// 16 MiB, as far as no reader still needs its frames, and starts over
// once no reader uses it. A reader that holds an old snapshot (a process
// paused mid-read, a transaction left open through DB()) keeps that from
// happening, and so can readers that overlap without a gap: the WAL then
// grows with every commit. Every 64 commits the writer looks at the WAL
// file, and past 32 MiB runs a checkpoint that waits up to 100 ms for
// the readers to reach the newest snapshot, copies everything and
// truncates the file (writers of every process wait meanwhile); when a
// reader still holds on it tries again 1,024 commits later. While a
// reader holds an old snapshot the WAL grows regardless: that is SQLite's
// design, and why a stopped process must not stay stopped.
//
// Keep a database's -wal and -shm files with it, and only with it. SQLite
// replays whatever WAL it finds next to the file, and nothing in a WAL ties
// it to one database: a -wal copied from another database is replayed into
// this one, which then silently holds the other's pages (a test confirmed
// it; the saver cannot tell, so Open does not refuse it). A damaged header
// is refused: Open fails with an error wrapping the driver's SQLITE_NOTADB
// and leaves the file as it was. Copy a live database with VACUUM INTO or
// the sqlite3 shell's .backup, never by copying its files.
//
// # Tables
//
// The schema version is kept in PRAGMA user_version and brought up to date
// by forward migrations when the file is opened; a file written by a newer
// version is refused with a *SchemaError (ErrSchemaTooNew) and left
// untouched. Schema 2 replaced schema 1's blobs table and the head
// columns of threads: opening a schema-1 file rewrites it once, in one
// transaction (ErrCannotMigrate, leaving the file as it was, for a
// schema-1 thread whose head is not its newest checkpoint). Schema 3 (this
// one) adds the lease's runner and epoch to threads, in place; a lease
// taken before it reads as epoch 0 until the next claim. JSON columns are
// TEXT, so the stock sqlite3 shell shows them.
//
// Open adds these tables to a database another program made when its
// user_version is 0, so that an application can keep its checkpoints
// beside its own tables (lockstep then owns user_version). A file whose
// user_version another program set, without lockstep's tables, is refused
// (ErrNotLockstep) and left as it was. OpenExisting, for tools that only
// inspect a file they were pointed at, never creates, migrates or
// otherwise changes one: it opens only a lockstep database at this schema
// (ErrNotLockstep, ErrSchemaTooOld and ErrSchemaTooNew otherwise).
//
//	checkpoints  one row per checkpoint: everything a Put writes
//	  thread_id, checkpoint_ns, checkpoint_id   the key; IDs sort in creation order
//	  parent_checkpoint_id       the checkpoint it was written after (NULL for the first)
//	  step, source               copies of the metadata fields, for SQL
//	  created_at                 RFC 3339, UTC, nine fraction digits
//	  metadata                   JSON object: source, step, parents, run_id, run-key (input checkpoints of a keyed run) and caller keys, flat
//	  versions                   JSON object: channel -> version (the ID of the checkpoint that wrote it)
//	  channels                   JSON object: the channels this checkpoint changed, each
//	                               {"value": <json>}, or {"append": <json array of new items>,
//	                               "base": "<version extended, '' for the empty value>"};
//	                               a channel at version v is in row v
//	  task_writes                JSON array: the writes of the tasks that produced this checkpoint
//	                               (pending writes of its parent), [{"task_id", "node", "path",
//	                               "writes": [["<channel>", <json>], ...]}, ...]; NULL when none
//	  mark                       the breakpoint/resume mark (checkpoint.Checkpoint.Mark)
//	  pruned                     1: the checkpoint was pruned; the row stays, stripped to the
//	                               channels that kept checkpoints still read (see Prune)
//	  crc                        CRC-32C of every column above, the key included
//
//	threads      one row per thread and namespace that has a checkpoint or a lease
//	  thread_id, checkpoint_ns   the key ("" is the root graph)
//	  lease_owner, lease_until   the run that owns the thread, and until when (unix
//	                               nanoseconds); NULL when free
//	  lease_runner               the runner of lease_owner (checkpoint.Lease.Runner); NULL
//	                               when free or unnamed
//	  lease_epoch                how many times the lease passed to a new owner (0: never,
//	                               or not since schema 3); kept when the lease is released
//	  updated_at                 the last PutWrites, or Put that took or dropped the lease
//	                               (RFC 3339, UTC); a thread's update time is the later of this
//	                               and its head's created_at
//
//	writes       pending writes saved with PutWrites (in-flight tasks, interrupts, errors,
//	             resume answers, durable steps) and a Put's own Writes
//	  thread_id, checkpoint_ns, checkpoint_id, task_id, idx   the key (idx: checkpoint.WriteIndex)
//	  channel, value             the channel and its JSON value
//	  node, path                 the task's node and path ("pull" or "push:<n>")
//	  created_at                 when it was first saved (a special write saved again keeps
//	                               its row, rowid and created_at)
//	  crc                        CRC-32C of channel, node, path and value
//
//	thread_heads (view)  every thread's head: the row with the largest checkpoint ID
//	  thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, step, source,
//	  created_at, updated_at, lease_owner, lease_until, metadata, versions,
//	  lease_runner, lease_epoch
//
// Every thread's latest checkpoint, with the sqlite3 shell:
//
//	SELECT thread_id, checkpoint_id, step, source, updated_at, metadata, versions
//	FROM thread_heads
//	WHERE checkpoint_ns = ''
//	ORDER BY updated_at DESC;
//
// The channel versions a thread stored, one per row:
//
//	SELECT c.checkpoint_id, j.key AS channel, j.value
//	FROM checkpoints c, json_each(c.channels) j
//	WHERE c.thread_id = 'alpha'
//	ORDER BY c.checkpoint_id, j.key;
//
// Other packages keep their own tables in the same file through DB().
//
// # Testing aids
//
// Config.Hook calls a function at named points of the write transactions
// (crash tests kill the process there), and Config.DriverName opens the
// file through another registered database/sql driver wrapping the sqlite3
// one (the tests use the fault-injecting driver of internal/faultdb).
// Production code sets neither.
package sqlite
