package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Schema 1 checksums, for the migration: a checkpoint row's covered its
// parent, created_at, metadata, versions and mark; a blob's its kind, base
// and value.
func checkpointCRC1(parent, created, metadata, versions, mark string) int64 {
	return crcString(parent, created, metadata, versions, mark)
}

func blobCRC1(kind, base string, value []byte) int64 {
	return crcOf([]byte(kind), []byte(base), value)
}

// spoil turns a checksum into one that cannot match: the migration gives
// it to a row built from schema-1 data that failed its own checksum, so
// that reading it still reports the corruption (a rewrite must not launder
// it).
func spoil(crc int64) int64 { return int64(uint32(crc) ^ 0xffffffff) }

// blob1 is a schema-1 blobs row.
type blob1 struct {
	channel, version, base, kind string
	value                        []byte
	ok                           bool // its checksum matched
}

// migrateRows1 rewrites schema-1 rows into checkpoints_v2 and threads_v2
// (schema 2), in the migration's transaction:
//
//   - every checkpoint row gets the blobs of the channels it wrote (blobs
//     whose version is its ID) as its channels column, and no task_writes:
//     the pending writes of schema 1, whatever wrote them, stay in the
//     writes table, which keeps its layout;
//   - blobs whose checkpoint was pruned (kept because a kept checkpoint's
//     append chain goes through them) become pruned rows holding them;
//   - the threads rows keep their lease and updated_at. The head of a
//     schema-1 thread is its head_checkpoint_id; schema 2 takes the
//     largest ID, so a thread whose head is not its largest ID (a fork
//     given an older ID) stops the migration with an error naming it, and
//     the file is left as it was.
//
// A row or blob that fails its schema-1 checksum is carried over with a
// checksum that does not match, so that reading it reports the corruption.
func migrateRows1(ctx context.Context, conn *sql.Conn) error {
	rows, err := conn.QueryContext(ctx, `SELECT t.thread_id, t.checkpoint_ns, t.head_checkpoint_id,
	(SELECT max(c.checkpoint_id) FROM checkpoints c WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = t.checkpoint_ns)
FROM threads t WHERE t.head_checkpoint_id IS NOT NULL AND t.head_checkpoint_id IS NOT
	(SELECT max(c.checkpoint_id) FROM checkpoints c WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = t.checkpoint_ns)
LIMIT 1`)
	if err != nil {
		return err
	}
	if rows.Next() {
		var thread, ns, head string
		var newest sql.NullString
		err := rows.Scan(&thread, &ns, &head, &newest)
		rows.Close()
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: thread %q ns %q: its head %q is not its newest checkpoint %q (a fork was given an older ID), and schema 2 takes the newest checkpoint as the head",
			ErrCannotMigrate, thread, ns, head, newest.String)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO threads_v2 (thread_id, checkpoint_ns, lease_owner, lease_until, updated_at)
SELECT thread_id, checkpoint_ns, lease_owner, lease_until, updated_at FROM threads`); err != nil {
		return err
	}
	var keys [][2]string
	rows, err = conn.QueryContext(ctx, `SELECT thread_id, checkpoint_ns FROM checkpoints UNION SELECT thread_id, checkpoint_ns FROM blobs`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k [2]string
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			rows.Close()
			return err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	ins, err := conn.PrepareContext(ctx, `INSERT INTO checkpoints_v2 (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, step, source, created_at,
	metadata, versions, channels, task_writes, mark, pruned, crc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer ins.Close()
	for _, k := range keys {
		if err := migrateThread1(ctx, conn, ins, k[0], k[1]); err != nil {
			return fmt.Errorf("thread %q ns %q: %w", k[0], k[1], err)
		}
	}
	return nil
}

// migrateThread1 rewrites the checkpoints and blobs of one thread and
// namespace.
func migrateThread1(ctx context.Context, conn *sql.Conn, ins *sql.Stmt, thread, ns string) error {
	blobs := map[string][]blob1{}
	rows, err := conn.QueryContext(ctx, `SELECT channel, version, base, kind, value, crc FROM blobs WHERE thread_id = ? AND checkpoint_ns = ?`, thread, ns)
	if err != nil {
		return err
	}
	for rows.Next() {
		var b blob1
		var crc int64
		if err := rows.Scan(&b.channel, &b.version, &b.base, &b.kind, &b.value, &crc); err != nil {
			rows.Close()
			return err
		}
		b.ok = blobCRC1(b.kind, b.base, b.value) == crc && (b.kind == "value" || b.kind == "append")
		blobs[b.version] = append(blobs[b.version], b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	// channels encodes the blobs written at version; ok is false when one
	// of them failed its checksum.
	channels := func(version string) ([]byte, bool) {
		bs := blobs[version]
		slices.SortFunc(bs, func(a, b blob1) int { return strings.Compare(a.channel, b.channel) })
		out := []byte{'{'}
		ok := true
		for i, b := range bs {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendBlob(appendString(out, b.channel), checkpoint.Blob{Append: b.kind == "append", Base: b.base, Data: b.value})
			ok = ok && b.ok
		}
		return append(out, '}'), ok
	}
	rows, err = conn.QueryContext(ctx, `SELECT checkpoint_id, parent_checkpoint_id, step, source, created_at, metadata, versions, mark, crc
FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ?`, thread, ns)
	if err != nil {
		return err
	}
	type row1 struct {
		id                                    string
		parent                                sql.NullString
		step                                  int64
		source, created, meta, versions, mark string
		crc                                   int64
	}
	var cps []row1
	for rows.Next() {
		var r row1
		if err := rows.Scan(&r.id, &r.parent, &r.step, &r.source, &r.created, &r.meta, &r.versions, &r.mark, &r.crc); err != nil {
			rows.Close()
			return err
		}
		cps = append(cps, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range cps {
		ch, ok := channels(r.id)
		delete(blobs, r.id)
		crc := rowCRC(thread, ns, r.id, r.parent.String, r.step, r.source, r.created, []byte(r.meta), []byte(r.versions), ch, nil, r.mark, false)
		if !ok || checkpointCRC1(r.parent.String, r.created, r.meta, r.versions, r.mark) != r.crc {
			crc = spoil(crc)
		}
		if _, err := ins.ExecContext(ctx, thread, ns, r.id, r.parent, r.step, r.source, r.created, r.meta, r.versions, string(ch), r.mark, 0, crc); err != nil {
			return fmt.Errorf("checkpoint %q: %w", r.id, err)
		}
	}
	// The blobs of pruned checkpoints: pruned rows that hold them.
	for _, version := range sortedKeys(blobs) {
		ch, ok := channels(version)
		crc := rowCRC(thread, ns, version, "", 0, "", "", []byte("{}"), []byte("{}"), ch, nil, "", true)
		if !ok {
			crc = spoil(crc)
		}
		if _, err := ins.ExecContext(ctx, thread, ns, version, nil, 0, "", "", "{}", "{}", string(ch), "", 1, crc); err != nil {
			return fmt.Errorf("pruned checkpoint %q: %w", version, err)
		}
	}
	return nil
}
