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
//   - Put writes the new checkpoint, the blobs of the channels it changed,
//     the parent's ParentWrites and its own Writes, the new head and the
//     lease in ONE transaction begun with BEGIN IMMEDIATE. A crash leaves
//     either the old head or the new one, never part of a step.
//   - One writer per thread: Put moves the head only from the checkpoint
//     it names as parent (compare-and-swap; Fork accepts any existing
//     checkpoint), and every write checks and takes the thread's lease.
//     The loser of a race gets a *checkpoint.ConflictError or a
//     *checkpoint.BusyError and nothing is written.
//   - Pending writes are keyed by (checkpoint, task, checkpoint.WriteIndex):
//     regular writes are insert-if-absent, so saving twice stores once
//     (also across a reopen); special writes (checkpoint.IsSpecial)
//     replace.
//   - Storage is proportional to what nodes write: a checkpoint stores only
//     its changed channels, an append stores only the new items and names
//     the version it extends. Get walks these links with one recursive
//     query and stops at the version the caller already holds
//     (checkpoint.GetOptions.Have), so reading the latest state costs the
//     size of the state, not the length of the history. List reads the
//     blobs and writes of all listed checkpoints in bulk and shares blob
//     bytes and chain prefixes between the tuples.
//   - Every stored value carries a CRC-32C (Castagnoli). A checksum
//     mismatch or a value that is not valid JSON is a
//     *checkpoint.CorruptError naming thread and checkpoint: stored data
//     never decodes silently to a zero value.
//   - SQLite failures are *StoreError values wrapping the driver's
//     sqlite3.Error: ErrStoreBusy when the database stayed locked for the
//     whole busy timeout (nothing was written; retry), and
//     ErrCommitIndeterminate when COMMIT itself failed (the write may or
//     may not be durable; read the head back, as the graph runtime does).
//     A write is never reported saved unless its COMMIT returned.
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
// an older checkpoint, and the runtime resumes from it.
//
// The saver writes through one dedicated connection with prepared
// statements, serialised by a mutex; reads use the rest of the pool, each
// in its own read transaction (one snapshot), in parallel with the writer
// (WAL). Several processes may open the same file: the SQLite write lock
// serialises them, waiting up to the busy timeout. The file must be on a
// local file system (WAL does not work over a network file system), and
// nothing but SQLite should open it while it is in use.
//
// # Tables
//
// The schema version is kept in PRAGMA user_version and brought up to date
// by forward migrations when the file is opened; a file written by a newer
// version is refused with a *SchemaError (ErrSchemaTooNew) and left
// untouched. JSON columns are TEXT, so the stock sqlite3 shell shows them.
//
//	threads      one row per thread and namespace
//	  thread_id, checkpoint_ns   the key ("" is the root graph)
//	  head_checkpoint_id         the thread's current checkpoint (NULL: claimed, none saved yet)
//	  step, source               the head's metadata step and source
//	  lease_owner, lease_until   the runner that owns the thread, and until when (unix nanoseconds)
//	  updated_at                 last Put or PutWrites (RFC 3339, UTC, nine fraction digits)
//
//	checkpoints  one row per checkpoint
//	  thread_id, checkpoint_ns, checkpoint_id   the key; IDs sort in creation order
//	  parent_checkpoint_id       the checkpoint it was written after (NULL for the first)
//	  step, source               copies of the metadata fields, for SQL
//	  created_at                 RFC 3339, UTC
//	  metadata                   JSON object: source, step, parents, run_id and caller keys, flat
//	  versions                   JSON object: channel -> version (the ID of the checkpoint that wrote it)
//	  mark                       the breakpoint/resume mark (checkpoint.Checkpoint.Mark)
//	  crc                        CRC-32C of parent, created_at, metadata, versions and mark
//
//	blobs        one row per channel version
//	  thread_id, checkpoint_ns, channel, version   the key
//	  kind                       'value' (the whole value) or 'append' (items appended to base)
//	  base                       for 'append': the version extended ('' = the empty value)
//	  value                      JSON: the value, or the JSON array of appended items
//	  crc                        CRC-32C of kind, base and value
//
//	writes       pending writes of tasks against a checkpoint
//	  thread_id, checkpoint_ns, checkpoint_id, task_id, idx   the key (idx: checkpoint.WriteIndex)
//	  channel, value             the channel and its JSON value
//	  node, path                 the task's node and path ("pull" or "push:<n>")
//	  created_at                 when it was saved
//	  crc                        CRC-32C of channel, node, path and value
//
// Every thread's latest checkpoint, with the sqlite3 shell:
//
//	SELECT t.thread_id, t.step, t.source, t.updated_at, c.checkpoint_id, c.metadata, c.versions
//	FROM threads t
//	JOIN checkpoints c ON c.thread_id = t.thread_id AND c.checkpoint_ns = t.checkpoint_ns
//	                  AND c.checkpoint_id = t.head_checkpoint_id
//	WHERE t.checkpoint_ns = ''
//	ORDER BY t.updated_at DESC;
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
