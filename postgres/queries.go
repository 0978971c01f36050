package postgres

import "strings"

// leaseOK is the lease rule of package checkpoint on the threads row t,
// for a request whose owner, runner, now, take-back owner (” for none)
// and held flag are the parameters named: a held request (Lease.Held, and every write of a
// run after its first: the fence of D17) needs the row's owner to be its
// own, live or lapsed with nobody having taken it since; any other needs
// the lease free, lapsed, its own, or one its runner takes back.
//
// With skip set the statement writes a subgraph's namespace, whose lease
// is the root row's: the caller checked and takes it there, in the same
// transaction, and this row's lease columns are left alone.
func leaseOK(owner, runner, now, takeback, held, skip string) string {
	r := strings.NewReplacer("$O", owner, "$R", runner, "$N", now, "$T", takeback, "$H", held, "$K", skip)
	return r.Replace(`($K OR (CASE WHEN $H THEN t.lease_owner IS NOT DISTINCT FROM $O
		ELSE t.lease_owner IS NULL OR t.lease_until <= $N OR t.lease_owner = $O OR ($T <> '' AND t.lease_owner = $T AND $R <> '' AND t.lease_runner = $R) END))`)
}

// leaseSet is the SET list that applies a request that passed leaseOK
// to the row t: release drops the lease; a live lease of the same owner
// is kept (unless renew: Claim extends it); a free, lapsed or taken-back
// one is taken until the request's until. The epoch grows whenever the
// lease passes to an owner that did not hold it.
func leaseSet(owner, runner, until, now, release, renew, skip string) string {
	r := strings.NewReplacer("$O", owner, "$R", runner, "$U", until, "$N", now, "$X", release, "$W", renew, "$K", skip)
	return r.Replace(`lease_epoch = CASE WHEN $K THEN t.lease_epoch ELSE t.lease_epoch + (CASE WHEN t.lease_owner IS DISTINCT FROM $O THEN 1 ELSE 0 END) END,
		lease_owner = CASE WHEN $K THEN t.lease_owner WHEN $X THEN NULL ELSE $O END,
		lease_runner = CASE WHEN $K THEN t.lease_runner WHEN $X THEN NULL WHEN NOT $W AND t.lease_owner = $O AND t.lease_until > $N THEN t.lease_runner ELSE nullif($R, '') END,
		lease_until = CASE WHEN $K THEN t.lease_until WHEN $X THEN NULL WHEN NOT $W AND t.lease_owner = $O AND t.lease_until > $N THEN t.lease_until ELSE $U END`)
}

// insertWrites inserts the pending writes of the JSON array param (task_id,
// idx, channel, node, path, value) on checkpoint cp, when the CTE from has
// a row: a regular write whose (task, idx) exists is kept, a special one
// (negative idx) replaces it and keeps its seq and created_at.
func insertWrites(from, param, cp, now string) string {
	r := strings.NewReplacer("$F", from, "$P", param, "$C", cp, "$N", now)
	return r.Replace(`INSERT INTO $S.writes AS w (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path, created_at, crc)
		SELECT $1, $2, $C, x.e ->> 'task_id', (x.e ->> 'idx')::integer, x.e ->> 'channel', x.e -> 'value', x.e ->> 'node', x.e ->> 'path', $N,
			$S.crc($1, $2, $C, x.e ->> 'task_id', x.e ->> 'idx', x.e ->> 'channel', x.e ->> 'node', x.e ->> 'path', (x.e -> 'value')::text)
		FROM $F, jsonb_array_elements($P::jsonb) AS x(e)
		ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE
			SET channel = excluded.channel, value = excluded.value, node = excluded.node, path = excluded.path, crc = excluded.crc
			WHERE excluded.idx < 0
		RETURNING 1`)
}

// Put parameters:
//
//	$1 thread  $2 ns  $3 id  $4 parent (NULL: none)  $5 step  $6 source
//	$7 created_at  $8 metadata  $9 versions  $10 mark  $11 blobs (JSON array)
//	$12 parent writes  $13 own writes  $14 owner  $15 runner ('' for none)
//	$16 until  $17 now  $18 release  $19 take back  $20 held  $21 fork
//	$22 metadata's exact text, when JSONB would spell a number of it otherwise
//	$23 skip the lease (a subgraph's namespace: the caller takes the root's)
var putSQL = `WITH
upd AS (
	UPDATE $S.threads t SET head = $3::text, updated_at = $17::bigint, ` + leaseSet("$14::text", "$15::text", "$16::bigint", "$17::bigint", "$18::boolean", "false", "$23::boolean") + `
	WHERE t.thread_id = $1::text AND t.checkpoint_ns = $2::text AND $4::text IS NOT NULL
		AND (CASE WHEN $21::boolean THEN $3::text > coalesce(t.head, '')
			AND EXISTS (SELECT 1 FROM $S.checkpoints p WHERE p.thread_id = $1 AND p.checkpoint_ns = $2 AND p.checkpoint_id = $4::text)
			ELSE t.head = $4::text END)
		AND ` + leaseOK("$14::text", "$15::text", "$17::bigint", "$19::text", "$20::boolean", "$23::boolean") + `
		AND NOT EXISTS (SELECT 1 FROM $S.checkpoints p WHERE p.thread_id = $1 AND p.checkpoint_ns = $2 AND p.checkpoint_id = $4::text AND p.step >= $5::bigint)
	RETURNING 1
),
ins AS (
	INSERT INTO $S.threads AS t (thread_id, checkpoint_ns, head, lease_owner, lease_runner, lease_epoch, lease_until, updated_at)
	SELECT $1::text, $2::text, $3::text, CASE WHEN $18::boolean OR $23::boolean THEN NULL ELSE $14::text END,
		CASE WHEN $18::boolean OR $23::boolean THEN NULL ELSE nullif($15::text, '') END, CASE WHEN $23::boolean THEN 0 ELSE 1 END,
		CASE WHEN $18::boolean OR $23::boolean THEN NULL ELSE $16::bigint END, $17::bigint
	WHERE $4::text IS NULL AND ($23::boolean OR NOT $20::boolean OR EXISTS (SELECT 1 FROM $S.threads WHERE thread_id = $1 AND checkpoint_ns = $2))
	ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET head = excluded.head, updated_at = excluded.updated_at, ` + leaseSet("$14::text", "$15::text", "$16::bigint", "$17::bigint", "$18::boolean", "false", "$23::boolean") + `
	WHERE (t.head IS NULL OR ($21::boolean AND $3::text > t.head))
		AND ` + leaseOK("$14::text", "$15::text", "$17::bigint", "$19::text", "$20::boolean", "$23::boolean") + `
	RETURNING 1
),
ok AS (SELECT 1 AS one FROM upd UNION ALL SELECT 1 FROM ins),
cp AS (
	INSERT INTO $S.checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, step, source, created_at, metadata, metadata_text, versions, mark, crc)
	SELECT $1, $2, $3, $4, $5, $6::text, $7::text, $8::jsonb, $22::text, $9::jsonb, $10::text,
		$S.crc($1, $2, $3, $4, $5::text, $6::text, $7::text, $8::jsonb::text, $22::text, $9::jsonb::text, $10::text)
	FROM ok
	RETURNING 1
),
bl AS (
	INSERT INTO $S.blobs (thread_id, checkpoint_ns, channel, version, kind, base, value, crc)
	SELECT $1, $2, b.e ->> 'channel', $3, b.e ->> 'kind', b.e ->> 'base', b.e -> 'value',
		$S.crc($1, $2, b.e ->> 'channel', $3, b.e ->> 'kind', b.e ->> 'base', (b.e -> 'value')::text)
	FROM ok, jsonb_array_elements($11::jsonb) AS b(e)
	RETURNING 1
),
pw AS (` + insertWrites("ok", "$12", "$4", "$17") + `),
ow AS (` + insertWrites("ok", "$13", "$3", "$17") + `)
SELECT count(*) FROM ok`

// PutWrites parameters:
//
//	$1 thread  $2 ns  $3 checkpoint (the head)  $4 writes (JSON array)
//	$5 owner  $6 runner  $7 until  $8 now  $9 release  $10 take back  $11 held
//	$12 skip the lease (see Put)
var putWritesSQL = `WITH
upd AS (
	UPDATE $S.threads t SET updated_at = $8::bigint, ` + leaseSet("$5::text", "$6::text", "$7::bigint", "$8::bigint", "$9::boolean", "false", "$12::boolean") + `
	WHERE t.thread_id = $1::text AND t.checkpoint_ns = $2::text AND t.head = $3::text
		AND ` + leaseOK("$5::text", "$6::text", "$8::bigint", "$10::text", "$11::boolean", "$12::boolean") + `
	RETURNING 1
),
w AS (` + insertWrites("upd", "$4", "$3", "$8") + `)
SELECT count(*) FROM upd`

// Claim parameters:
//
//	$1 thread  $2 ns  $3 head (NULL: none)  $4 owner  $5 runner  $6 until
//	$7 now  $8 take back  $9 held  $10 skip the lease (see Put)
var claimSQL = `WITH
upd AS (
	UPDATE $S.threads t SET ` + leaseSet("$4::text", "$5::text", "$6::bigint", "$7::bigint", "false", "true", "$10::boolean") + `
	WHERE t.thread_id = $1::text AND t.checkpoint_ns = $2::text AND $3::text IS NOT NULL AND t.head = $3::text
		AND ` + leaseOK("$4::text", "$5::text", "$7::bigint", "$8::text", "$9::boolean", "$10::boolean") + `
	RETURNING 1
),
ins AS (
	INSERT INTO $S.threads AS t (thread_id, checkpoint_ns, head, lease_owner, lease_runner, lease_epoch, lease_until, updated_at)
	SELECT $1::text, $2::text, NULL, CASE WHEN $10::boolean THEN NULL ELSE $4::text END, CASE WHEN $10::boolean THEN NULL ELSE nullif($5::text, '') END,
		CASE WHEN $10::boolean THEN 0 ELSE 1 END, CASE WHEN $10::boolean THEN NULL ELSE $6::bigint END, $7::bigint
	WHERE $3::text IS NULL AND ($10::boolean OR NOT $9::boolean OR EXISTS (SELECT 1 FROM $S.threads WHERE thread_id = $1 AND checkpoint_ns = $2))
	ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET ` + leaseSet("$4::text", "$5::text", "$6::bigint", "$7::bigint", "false", "true", "$10::boolean") + `
	WHERE t.head IS NULL AND ` + leaseOK("$4::text", "$5::text", "$7::bigint", "$8::text", "$9::boolean", "$10::boolean") + `
	RETURNING 1
)
SELECT (SELECT count(*) FROM upd) + (SELECT count(*) FROM ins)`

// releaseSQL drops owner $3's lease: a thread row that holds nothing
// else (no checkpoint, no due mark, no queued input) goes; any other keeps
// its epoch and its due work.
const releaseSQL = `WITH
empty AS (SELECT t.head IS NULL AND t.due_at IS NULL AND NOT EXISTS (SELECT 1 FROM $S.queued_inputs q WHERE q.thread_id = $1::text) AS gone
	FROM $S.threads t WHERE t.thread_id = $1::text AND t.checkpoint_ns = $2::text AND t.lease_owner = $3::text),
del AS (DELETE FROM $S.threads WHERE thread_id = $1::text AND checkpoint_ns = $2::text AND lease_owner = $3::text AND (SELECT gone FROM empty) RETURNING 1)
UPDATE $S.threads SET lease_owner = NULL, lease_runner = NULL, lease_until = NULL
WHERE thread_id = $1::text AND checkpoint_ns = $2::text AND lease_owner = $3::text AND NOT (SELECT gone FROM empty)`

const deleteThreadSQL = `WITH
q AS (DELETE FROM $S.queued_inputs WHERE thread_id = $1::text),
a AS (DELETE FROM $S.writes WHERE thread_id = $1::text),
b AS (DELETE FROM $S.blobs WHERE thread_id = $1::text),
c AS (DELETE FROM $S.checkpoints WHERE thread_id = $1::text)
DELETE FROM $S.threads WHERE thread_id = $1::text`

// threadSQL reads the thread's row for a refused request's diagnosis.
// The head is the namespace's; the lease is the thread's one lease, on its
// root row.
const threadSQL = `SELECT (SELECT head FROM $S.threads WHERE thread_id = $1::text AND checkpoint_ns = $2::text),
	EXISTS (SELECT 1 FROM $S.threads WHERE thread_id = $1::text AND checkpoint_ns = $2::text),
	r.lease_owner, r.lease_runner, coalesce(r.lease_epoch, 0), r.lease_until, r.thread_id IS NOT NULL
FROM (SELECT 1) AS one LEFT JOIN $S.threads r ON r.thread_id = $1::text AND r.checkpoint_ns = ''`

// rootLeaseSQL locks the thread's root row for a write in a subgraph's
// namespace.
const rootLeaseSQL = `SELECT lease_owner, lease_runner, lease_epoch, lease_until FROM $S.threads WHERE thread_id = $1::text AND checkpoint_ns = '' FOR UPDATE`

// takeRootSQL takes (or renews, or drops) the thread's lease on its root
// row for a write in a subgraph's namespace that passed the lease rule:
//
//	$1 thread  $2 owner  $3 runner  $4 until  $5 now  $6 release  $7 renew  $8 an update of the thread
const takeRootSQL = `INSERT INTO $S.threads AS t (thread_id, checkpoint_ns, head, lease_owner, lease_runner, lease_epoch, lease_until, updated_at)
VALUES ($1::text, '', NULL, CASE WHEN $6::boolean THEN NULL ELSE $2::text END, CASE WHEN $6::boolean THEN NULL ELSE nullif($3::text, '') END, 1,
	CASE WHEN $6::boolean THEN NULL ELSE $4::bigint END, $5::bigint)
ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET ` + `lease_epoch = t.lease_epoch + (CASE WHEN t.lease_owner IS DISTINCT FROM $2::text THEN 1 ELSE 0 END),
	lease_owner = CASE WHEN $6::boolean THEN NULL ELSE $2::text END,
	lease_runner = CASE WHEN $6::boolean THEN NULL WHEN NOT $7::boolean AND t.lease_owner = $2::text AND t.lease_until > $5::bigint THEN t.lease_runner ELSE nullif($3::text, '') END,
	lease_until = CASE WHEN $6::boolean THEN NULL WHEN NOT $7::boolean AND t.lease_owner = $2::text AND t.lease_until > $5::bigint THEN t.lease_until ELSE $4::bigint END,
	updated_at = CASE WHEN $8::boolean THEN $5::bigint ELSE t.updated_at END`

// checkpointStepSQL reads a checkpoint's step (for the diagnosis of a
// refused Put: a fork's parent must exist, the ID must be new, the step
// must follow the parent's).
const checkpointStepSQL = `SELECT step FROM $S.checkpoints WHERE thread_id = $1::text AND checkpoint_ns = $2::text AND checkpoint_id = $3::text`

// interruptIDsSQL reads the interrupt writes saved on a checkpoint, for
// checkpoint.CheckInterruptIDs.
const interruptIDsSQL = `SELECT task_id, value FROM $S.writes WHERE thread_id = $1::text AND checkpoint_ns = $2::text AND checkpoint_id = $3::text AND channel = '__interrupt__'`

const lockThreadSQL = `SELECT 1 FROM $S.threads WHERE thread_id = $1::text AND checkpoint_ns = $2::text FOR UPDATE`

// getSQL reads in one statement (one snapshot) the checkpoint $3 (the
// head when NULL), its pending writes, and the blobs of the channels the
// caller does not hold ($4: channel to version, or NULL), each append
// chain down to its base or to the version held. The kind column says
// which: 0 the checkpoint (its parent's step in depth), 1 a write, 2 a
// blob. Writes and blobs are mapped onto the checkpoint's columns.
const getSQL = `WITH RECURSIVE
cp AS (
	SELECT c.* FROM $S.checkpoints c
	WHERE c.thread_id = $1::text AND c.checkpoint_ns = $2::text
		AND c.checkpoint_id = coalesce($3::text, (SELECT t.head FROM $S.threads t WHERE t.thread_id = $1::text AND t.checkpoint_ns = $2::text))
),
need AS (
	SELECT v.key AS channel, v.value #>> '{}' AS version, $4::jsonb ->> v.key AS stop
	FROM cp, jsonb_each(cp.versions) v
	WHERE ($4::jsonb ->> v.key) IS DISTINCT FROM (v.value #>> '{}')
),
chain AS (
	SELECT b.channel, b.version, b.kind, b.base, b.value, b.crc, n.stop, 1 AS depth
	FROM need n JOIN $S.blobs b ON b.thread_id = $1::text AND b.checkpoint_ns = $2::text AND b.channel = n.channel AND b.version = n.version
	UNION ALL
	SELECT b.channel, b.version, b.kind, b.base, b.value, b.crc, c.stop, c.depth + 1
	FROM chain c JOIN $S.blobs b ON b.thread_id = $1::text AND b.checkpoint_ns = $2::text AND b.channel = c.channel AND b.version = c.base
	WHERE c.kind = 'append' AND c.base <> '' AND c.base IS DISTINCT FROM c.stop AND c.depth < 1000000
)
SELECT 0 AS kind, cp.checkpoint_id AS a, cp.parent_checkpoint_id AS b, cp.step AS n, cp.source AS c, cp.created_at AS d,
	cp.metadata AS j, cp.versions AS k, cp.mark AS e, cp.crc, cp.metadata_text AS m,
	(SELECT p.step FROM $S.checkpoints p WHERE p.thread_id = $1::text AND p.checkpoint_ns = $2::text AND p.checkpoint_id = cp.parent_checkpoint_id) AS depth
FROM cp
UNION ALL
SELECT 1, w.task_id, w.channel, w.idx::bigint, w.node, w.path, w.value, NULL, NULL, w.crc, NULL, NULL
FROM $S.writes w JOIN cp ON w.thread_id = $1::text AND w.checkpoint_ns = $2::text AND w.checkpoint_id = cp.checkpoint_id
UNION ALL
SELECT 2, chain.channel, chain.version, 0, chain.kind, chain.base, chain.value, NULL, chain.stop, chain.crc, NULL, chain.depth::bigint
FROM chain`

// listSQL reads a thread's checkpoint rows, newest first, in one
// namespace ($2) or all ($3), before $4 (or all when NULL).
const listSQL = `SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, step, source, created_at, metadata, versions, mark, crc, metadata_text
FROM $S.checkpoints
WHERE thread_id = $1::text AND ($3::boolean OR checkpoint_ns = $2::text) AND ($4::text IS NULL OR checkpoint_id < $4::text)
ORDER BY checkpoint_id DESC, checkpoint_ns`

// listWritesSQL reads the pending writes of the checkpoints ($2, $3) of
// thread $1.
const listWritesSQL = `SELECT w.checkpoint_ns, w.checkpoint_id, w.task_id, w.idx, w.channel, w.node, w.path, w.value, w.crc
FROM $S.writes w JOIN unnest($2::text[], $3::text[]) AS k(ns, id) ON w.thread_id = $1::text AND w.checkpoint_ns = k.ns AND w.checkpoint_id = k.id`

// listBlobsSQL reads the blobs ($2 namespaces, $3 channels, $4 versions)
// of thread $1 and every blob their append chains extend.
const listBlobsSQL = `WITH RECURSIVE chain AS (
	SELECT b.checkpoint_ns, b.channel, b.version, b.kind, b.base, b.value, b.crc, 1 AS depth
	FROM unnest($2::text[], $3::text[], $4::text[]) AS k(ns, channel, version)
	JOIN $S.blobs b ON b.thread_id = $1::text AND b.checkpoint_ns = k.ns AND b.channel = k.channel AND b.version = k.version
	UNION
	SELECT b.checkpoint_ns, b.channel, b.version, b.kind, b.base, b.value, b.crc, 1
	FROM chain c JOIN $S.blobs b ON b.thread_id = $1::text AND b.checkpoint_ns = c.checkpoint_ns AND b.channel = c.channel AND b.version = c.base
	WHERE c.kind = 'append' AND c.base <> ''
)
SELECT DISTINCT checkpoint_ns, channel, version, kind, base, value, crc FROM chain`

// threadsSQL lists the root-namespace heads, most recently updated first.
const threadsSQL = `SELECT t.thread_id, t.updated_at, c.checkpoint_id, c.parent_checkpoint_id, c.step, c.source, c.created_at, c.metadata, c.versions, c.mark, c.crc, c.metadata_text
FROM $S.threads t JOIN $S.checkpoints c ON c.thread_id = t.thread_id AND c.checkpoint_ns = t.checkpoint_ns AND c.checkpoint_id = t.head
WHERE t.checkpoint_ns = '' AND t.head IS NOT NULL
ORDER BY t.updated_at DESC, t.thread_id
OFFSET $1 LIMIT $2`

// interruptWritesSQL pages through the interrupt writes on root heads in
// the order they were first saved.
const interruptWritesSQL = `SELECT w.thread_id, w.checkpoint_id, w.task_id, w.seq, w.created_at
FROM $S.writes w JOIN $S.threads t ON t.thread_id = w.thread_id AND t.checkpoint_ns = '' AND t.head = w.checkpoint_id
WHERE w.checkpoint_ns = '' AND w.channel = '__interrupt__' AND w.seq >= $1::bigint
ORDER BY w.seq
LIMIT $2`

// headWritesSQL reads the pending writes of the checkpoints ($1 threads,
// $2 checkpoints) in the root namespace.
const headWritesSQL = `SELECT w.thread_id, w.checkpoint_id, w.task_id, w.idx, w.channel, w.node, w.path, w.value, w.crc
FROM $S.writes w JOIN unnest($1::text[], $2::text[]) AS k(thread, id) ON w.thread_id = k.thread AND w.checkpoint_ns = '' AND w.checkpoint_id = k.id`

const leaseSQL = `SELECT lease_owner, lease_runner, lease_epoch, lease_until FROM $S.threads WHERE thread_id = $1::text AND checkpoint_ns = ''`

// leasedBySQL lists the root threads whose lease names runner $1 and is
// live at $2, at most $3 (NULL: all), by thread ID.
const leasedBySQL = `SELECT thread_id, lease_owner, lease_epoch, lease_until FROM $S.threads
	WHERE lease_owner IS NOT NULL AND lease_runner = $1::text AND lease_until > $2::bigint AND checkpoint_ns = ''
	ORDER BY thread_id LIMIT $3::bigint`

// queries are the statements with the schema name in place.
type queries struct {
	put, putWrites, claim, release, deleteThread, thread, checkpointStep, interruptIDs, lockThread, rootLease, takeRoot string
	putTopology, topologyName, getTopology, latestTopology                                                              string
	get, list, listWrites, listBlobs, threads, interruptWrites, headWrites, lease, leasedBy                             string
	approval                                                                                                            approvalQueries
	work                                                                                                                workQueries
	ledger                                                                                                              ledgerQueries
}

func newQueries(schema string) *queries {
	s := func(q string) string { return sqlFor(schema, q) }
	return &queries{
		put: s(putSQL), putWrites: s(putWritesSQL), claim: s(claimSQL), release: s(releaseSQL), deleteThread: s(deleteThreadSQL),
		thread: s(threadSQL), checkpointStep: s(checkpointStepSQL), interruptIDs: s(interruptIDsSQL), lockThread: s(lockThreadSQL), rootLease: s(rootLeaseSQL), takeRoot: s(takeRootSQL),
		get: s(getSQL), list: s(listSQL), listWrites: s(listWritesSQL), listBlobs: s(listBlobsSQL), threads: s(threadsSQL),
		interruptWrites: s(interruptWritesSQL), headWrites: s(headWritesSQL), lease: s(leaseSQL), leasedBy: s(leasedBySQL),
		putTopology: s(putTopologySQL), topologyName: s(topologyNameSQL), getTopology: s(getTopologySQL), latestTopology: s(latestTopologySQL),
		approval: newApprovalQueries(s), ledger: newLedgerQueries(s), work: newWorkQueries(s),
	}
}
