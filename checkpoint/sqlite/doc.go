// Package sqlite is the SQLite checkpoint saver: a [checkpoint.Saver] (and
// Searcher, ThreadLister, InterruptLister, Pruner, Vacuumer, ChainPutter,
// LeaseInspector and TopologyStore) on one database file,
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
//     lease (or the lease of the ended run its runner names,
//     checkpoint.Lease.TakeBack), growing the thread's lease epoch. Saves keep a live lease as it is;
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
//   - Every row carries a CRC-32C (Castagnoli) of everything it holds and
//     of its key (thread, namespace, checkpoint and, for a pending write,
//     task and index), so that a row copied to another thread, checkpoint
//     or task does not verify there. A checksum mismatch, JSON that does
//     not decode, or a row that breaks a rule Put and PutWrites enforce
//     (checkpoint.VerifyTuple: special writes decoded as strictly as
//     state, a step from -1 to checkpoint.MaxStep that follows its
//     parent's, an ID that sorts after its parent's, channels that name
//     their node, interrupt IDs unique within a checkpoint) is a
//     *checkpoint.CorruptError naming thread and checkpoint: stored data
//     never decodes silently to a zero value or to something else, and a
//     row whose checksum an editor recomputed is still checked. Put and
//     PutWrites refuse the same (checkpoint.ErrInvalid), so only
//     corruption can store it.
//   - SQLite failures are *StoreError values wrapping the driver's
//     sqlite3.Error: ErrStoreBusy when the database stayed locked for the
//     whole busy timeout (nothing was written; retry), and
//     ErrCommitIndeterminate when COMMIT itself failed (the write may or
//     may not be durable; read the head back, as the graph runtime does).
//     A write is never reported saved unless its COMMIT returned.
//   - Group commit: Put, PutChain and PutWrites calls that wait for the
//     Saver's writer at once (many runs on one saver) commit in one
//     transaction, one COMMIT (one fsync at synchronous=FULL) for all,
//     each inside its own SAVEPOINT when it may have to undo a write (a
//     Put on its parent, one INSERT that checks the parent and the lease
//     and writes all or nothing, needs none). Each keeps its own result:
//     a call refused by its own checks (a conflict, a busy or fenced
//     lease) writes nothing, or rolls back to its savepoint, and fails
//     alone while the others commit; when SQLite fails a statement in the middle, the group is
//     rolled back and each call runs again alone, so that the failure is
//     reported by the call it belongs to. A crash leaves each call's
//     checkpoint and writes whole or absent. A call that finds the writer
//     idle commits at once, alone: no timer, nothing waits for company.
//     Config.GroupCommitMax and Config.GroupCommitBytes bound a group;
//     GroupStats counts them.
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
// reader still holds on it tries again 1,024 commits later. SQLite
// refuses such a checkpoint at once while another connection runs one
// (the automatic checkpoint after another process's commit, frequent on
// a busy file and longer on a loaded machine): that refusal is tried
// again within the same 100 ms, and at the next look. While a reader
// holds an old snapshot the WAL grows regardless: that is SQLite's
// design, and why a stopped process must not stay stopped.
//
// Keep a database's -wal and -shm files with it, and only with it, and
// never delete, move or replace them while a program has the database
// open. Copy a live database with VACUUM INTO or the sqlite3 shell's
// .backup, never by copying its files.
//
// A -wal of another database beside the file: SQLite replays whatever WAL
// it finds next to a database, and the last connection to close copies it
// into the file, so a -wal copied from another database would replace
// this one's pages (every thread gone, silently). Nothing in the WAL
// format ties a WAL to one database, so the saver gives each file an
// identity: a random PRAGMA application_id (one another program set is
// kept), recorded a second time in the one-row table lockstep_file. A new
// file gets both in its first transaction, written to the database file
// itself in rollback-journal mode before it is switched to WAL, so the
// lockstep_file page is in no -wal; page 1, the header that holds
// application_id, is written again within the first two commits of every
// generation of the -wal (SQLite starts the -wal over after a complete
// checkpoint). Before SQLite sees a -wal, Open and OpenExisting read its
// frames themselves (the format is documented), and when there is one
// they read the file with it through a read-only connection, which can
// neither copy it into the file nor delete it: if the two copies of the
// identity differ, or SQLite cannot read the file with it (SQLITE_CORRUPT
// or SQLITE_NOTADB), the open fails with a *WALError matching
// ErrForeignWAL, and the database and the -wal are left byte for byte as
// they were (SQLite may rebuild the -shm, its index of the -wal). A -wal
// with frames beside a missing or empty database file is refused the
// same way: SQLite would delete it, and it is the only copy of another
// database's last commits. What remains undetectable:
//
//   - a -wal of another database that holds neither its page 1 nor its
//     lockstep_file page: its commits since it last started over did not
//     change the file's size or schema, and came before the saver's
//     second commit of that generation (or were made by other programs
//     through DB() alone); its other pages replace this database's;
//   - a -wal of another database whose identity equals this one's: a copy
//     of this database (a restored backup, a copied file) has the same
//     identity, so a -wal of the copy beside the original, or an old -wal
//     beside a restored file, is replayed; so is one of another database
//     of an application that set application_id itself, which all its
//     files share;
//   - a -wal of another database that holds both pages, consistently: one
//     whose file was upgraded from a lockstep without identities (its
//     lockstep_file row is written by that first Open, into the -wal) and
//     not checkpointed since, or one that was vacuumed;
//   - any -wal beside a file no version with identities has opened yet
//     (a file of an older lockstep, or another program's), and one whose
//     other database had no identity (an older lockstep's, another
//     program's) when this file's page 1 is not in it: there is nothing
//     to compare;
//   - a -wal overwritten in place (cp over it) while the database is open.
//
// An application that shares the file must therefore leave its
// application_id alone once lockstep has opened it (set one before, and
// lockstep keeps it): changed, the two copies differ, and Open refuses the
// file (ErrSchemaInvalid without a -wal, ErrForeignWAL with one) until it
// is set back.
//
// The -wal deleted, moved or replaced under a running saver: SQLite goes
// on writing the file it has open, which no connection opened later and no
// other process reads, and which disappears with the process, so every
// commit acknowledged from then on would be lost when it exits. The saver
// keeps a descriptor of the -wal SQLite had open when it opened the
// database; before each commit (and Vacuum) the writer asks whether that
// file lost its name (one fstat: deleted, or another file renamed over
// it), and every 8 commits whether the path still names it (one stat:
// moved away); with the read of the -wal header after each commit (see
// above) that is about 1 us a commit where a Put takes 55 to 90 us
// (BenchmarkWALCheck, BenchmarkPut, on a loaded machine). When the
// file lost its name or the path names no file or another one, that
// commit is rolled back, and it and every later write fail with a
// *WALError matching ErrWALDeleted; a FULL checkpoint then copies the
// commits acknowledged before into the database file through the deleted
// file (WALError.Saved says whether it finished), so that they survive
// the process. Close the saver and open the database again. The window:
// a commit that was past the check when the file went (and, for a file
// moved to another name, up to 7 more) is acknowledged into it, and is
// saved only by that checkpoint (at the next write) or by Close, so a
// process killed before either loses it, as it does every commit
// acknowledged before the file went and not yet copied into the
// database; other packages' writes through DB() are not checked.
// When the path changed because SQLite let go of the old file (no
// descriptor of this process has it open any more: the last connection,
// in another process, closed it and deleted it, as SQLite does), the saver
// follows the new one instead; that is known from /proc/self/fd, and
// without it (not Linux) the commit is refused.
//
// A damaged header is refused: Open fails with an error wrapping the
// driver's SQLITE_NOTADB and leaves the file as it was.
//
// # Tables
//
// The schema version is kept in PRAGMA user_version and brought up to date
// by forward migrations when the file is opened, every migration a file
// needs in one transaction with the version that records them and the
// file's identity: a process killed while it sets up or migrates a file
// leaves it as it was (a new file then holds no lockstep tables, and
// OpenExisting says its creation was cut short; the next Open sets it
// up), never half way between two schemas. A file written by a newer
// version is refused with a *SchemaError (ErrSchemaTooNew) and left
// untouched, and so is one whose version no lockstep writes (a
// *SchemaError matching ErrSchemaInvalid: negative, 0 beside lockstep's
// tables, or a version whose tables are not there). Schema 2 replaced
// schema 1's blobs table and the head columns of threads: opening a
// schema-1 file rewrites it once, in one transaction (ErrCannotMigrate,
// leaving the file as it was, for a schema-1 thread whose head is not its
// newest checkpoint). Schema 3 adds the lease's runner and epoch to
// threads, in place; a lease taken before it reads as epoch 0 until the
// next claim. Schema 4 keeps the tables and changes what a
// writes row's checksum covers: schemas 1 to 3 summed only its channel,
// node, path and value, so a row copied to another thread verified there
// (and that thread showed, and could be resumed through, the other
// thread's interrupt). Opening an older file re-checksums every writes
// row once, with the other migrations it needs; a row whose old checksum
// did not match gets one that does not match either, so the corruption
// is still reported. The old rule is not kept for old rows: a reader
// that accepted rows summed without their key would accept copies for
// ever, and a lockstep that knows only schema 3 refuses a schema-4 file
// (ErrSchemaTooNew) rather than reading its rows as corrupt. Schema 5
// adds the topologies table (checkpoint.TopologyStore); checkpoints
// written before it name no topology. Schema 6 (this one) adds the work
// of a pool of workers (due_at and the other due columns of threads,
// queued_inputs, and the partial indexes claims walk), in place: a thread
// whose lease expired unreleased is due at once after the migration.
// OpenExisting reads a schema-4 or schema-5 file as it is: it stores no
// topologies (schema 4) and no due work or queued input, so that the
// DueWork and InputQueue methods fail with a *SchemaError
// (ErrSchemaTooOld) on it. JSON columns are TEXT, so the stock sqlite3
// shell shows them.
//
// Open adds these tables to a database another program made when its
// user_version is 0, so that an application can keep its checkpoints
// beside its own tables (lockstep then owns user_version, and
// application_id when the application left it 0). A file whose
// user_version another program set, without lockstep's tables, or with a
// table of a name lockstep's need, is refused (ErrNotLockstep) and left
// as it was. OpenExisting, for tools that only
// inspect a file they were pointed at, never creates, migrates or
// otherwise changes one: it opens only a lockstep database at this schema
// or at schema 4, which it reads as it is, with no topologies stored
// (ErrNotLockstep, ErrSchemaTooOld and ErrSchemaTooNew otherwise).
//
//	checkpoints  one row per checkpoint: everything a Put writes
//	  thread_id, checkpoint_ns, checkpoint_id   the key; IDs sort in creation order
//	  parent_checkpoint_id       the checkpoint it was written after (NULL for the first)
//	  step, source               copies of the metadata fields, for SQL
//	  created_at                 RFC 3339, UTC, nine fraction digits
//	  metadata                   JSON object: source, step, parents, run_id, run-key (input checkpoints of a keyed run),
//	                               topology-fp (the fingerprint of the graph that wrote it: a row of topologies),
//	                               durability-mode (sync, async or exit: the mode of the run that wrote it;
//	                               absent on checkpoints written before lockstep recorded it) and caller keys, flat
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
//	  crc                        CRC-32C of every column above, the key included, each followed
//	                               by a NUL byte (step as decimal text, pruned as 0 or 1, a NULL
//	                               parent or task_writes as empty)
//	  links                      JSON object: for each channel this row holds as an append, the
//	                               version it extends, {"<channel>": "<base>"} ('{}' for none): an
//	                               index of channels, which reads walk append chains through
//	                               without parsing each row's channels. Not in crc: reads take
//	                               every value from channels, and links that disagree with them
//	                               only send the walk back to channels. NULL on rows written
//	                               before schema 7
//
//	threads      one row per thread that has a checkpoint, a lease, due work or queued
//	             input: the thread's lease, which all its namespaces share, and its due work
//	  thread_id, checkpoint_ns   the key; checkpoint_ns is "" (a row of another namespace,
//	                               from before leases were per thread, is ignored)
//	  lease_owner, lease_until   the run that owns the thread, and until when (unix
//	                               nanoseconds); NULL when free
//	  lease_runner               the runner of lease_owner (checkpoint.Lease.Runner); NULL
//	                               when free or unnamed
//	  lease_epoch                how many times the lease passed to a new owner (0: never,
//	                               or not since schema 3); kept when the lease is released
//	  updated_at                 the last PutWrites, or Put that took or dropped the lease, in
//	                               any namespace (RFC 3339, UTC); a thread's update time is the
//	                               later of this and its head's created_at
//	  due_at                     when the thread has work due for a pool of workers (unix
//	                               nanoseconds on the saver's clock; checkpoint.DueWork):
//	                               set by a claim until it is settled, by queued input, by a
//	                               retry; NULL: none marked (a lease that expired unreleased
//	                               is due all the same)
//	  due_owner                  the lease owner of the thread's current claim (its token)
//	  due_attempts               failed attempts the last settle recorded
//	  due_parked                 the head the thread's queued input waits behind ('' for no
//	                               checkpoint); NULL when not parked
//
//	queued_inputs  input queued for a thread (checkpoint.InputQueue), applied oldest first
//	  input_id                   orders all inputs; never reused
//	  thread_id, run_key         the thread and the input's run key (unique per thread)
//	  input                      JSON object: {"fields": {<field>: <json>}, "overwrite": [...]}
//	  created_at                 RFC 3339, UTC
//	  crc                        CRC-32C of thread_id, run_key, input and created_at
//
//	writes       pending writes saved with PutWrites (in-flight tasks, interrupts, errors,
//	             resume answers, durable steps) and a Put's own Writes
//	  thread_id, checkpoint_ns, checkpoint_id, task_id, idx   the key (idx: checkpoint.WriteIndex)
//	  channel, value             the channel and its JSON value
//	  node, path                 the task's node and path ("pull" or "push:<n>")
//	  created_at                 when it was first saved (a special write saved again keeps
//	                               its row, rowid and created_at)
//	  crc                        CRC-32C of thread_id, checkpoint_ns, checkpoint_id, task_id, idx
//	                               (decimal), channel, node, path and value, each followed by a NUL
//	                               byte (not created_at, which a write saved again keeps)
//
//	lockstep_file  one row: the file's identity, as PRAGMA application_id holds it
//	  id                         a 32-bit integer, written once (see the -wal above)
//
//	topologies   one row per distinct graph topology stored (checkpoint.TopologyStore)
//	  fingerprint                the key: checkpoint.TopologyFingerprint of topology (32 hex digits),
//	                               which is also its checksum
//	  name                       the graph's name (graph.WithName); its versions share it
//	  topology                   JSON object: the canonical encoding package graph writes
//	                               (graph.Topology: format, name, nodes, edges, joins, branches,
//	                               interrupt_before, interrupt_after)
//	  created_at, stored_at      when it was first and last stored (RFC 3339, UTC)
//	  stored_seq                 orders the stores of one name: the newest topology of a name
//	                               has the largest
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
// The threads with work due or queued, and how much:
//
//	SELECT t.thread_id, t.due_at, t.lease_owner, t.due_attempts, t.due_parked,
//		(SELECT count(*) FROM queued_inputs q WHERE q.thread_id = t.thread_id) AS queued
//	FROM threads t
//	WHERE t.checkpoint_ns = '' AND (t.due_at IS NOT NULL OR t.due_parked IS NOT NULL);
//
// The channel versions a thread stored, one per row:
//
//	SELECT c.checkpoint_id, j.key AS channel, j.value
//	FROM checkpoints c, json_each(c.channels) j
//	WHERE c.thread_id = 'alpha'
//	ORDER BY c.checkpoint_id, j.key;
//
// The graph each thread's head was saved under:
//
//	SELECT h.thread_id, h.checkpoint_id, t.name, t.fingerprint, t.stored_at
//	FROM thread_heads h
//	LEFT JOIN topologies t ON t.fingerprint = json_extract(h.metadata, '$."topology-fp"')
//	WHERE h.checkpoint_ns = ''
//	ORDER BY h.thread_id;
//
// Other packages keep their own tables in the same file through DB().
//
// # Testing aids
//
// Two Config fields are for tests and production code sets neither:
// Config.Hook calls a function at named points of the write transactions
// and of Open's set-up (crash tests kill the process there), and
// Config.DriverName opens the file through another registered
// database/sql driver that wraps go-sqlite3 (fault tests fail chosen
// operations). They are public because tests of several packages of this
// module need them; each field's doc says what it costs when set.
package sqlite
