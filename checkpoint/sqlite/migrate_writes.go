package sqlite

import (
	"context"
	"database/sql"
)

// Schema 4 binds the checksum of a writes row to the row's key. Schemas 1
// to 3 checksummed only what a row holds (channel, node, path, value),
// so a row copied to another thread, checkpoint or task verified there,
// and that thread then showed, and could be resumed through, the other
// thread's interrupt. The migration re-checksums every row once, in the
// migration's transaction, rather than verifying old rows by the old
// rule for ever: after it no row anywhere verifies by a rule that ignores
// its key, and a lockstep that knows only schema 3 refuses the file
// (ErrSchemaTooNew) instead of reading every new row as corrupt.

// writeCRC2 is a writes row's checksum in schemas 1 to 3.
func writeCRC2(channel, node, path string, value []byte) int64 {
	return crcOf([]byte(channel), []byte(node), []byte(path), value)
}

// migrateWritesCRC gives every writes row the schema-4 checksum
// (writeCRC). A row whose schema-2 checksum did not match gets one that
// does not either (spoil), so that reading it still reports the
// corruption: the rewrite must not launder it.
func migrateWritesCRC(ctx context.Context, conn *sql.Conn) error {
	rows, err := conn.QueryContext(ctx, `SELECT rowid, thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path, crc FROM writes`)
	if err != nil {
		return err
	}
	type fix struct{ rowid, crc int64 }
	var fixes []fix
	for rows.Next() {
		var r writeRow
		var rowid, crc int64
		var thread, ns string
		if err := rows.Scan(&rowid, &thread, &ns, &r.checkpoint, &r.task, &r.idx, &r.channel, &r.value, &r.node, &r.path, &crc); err != nil {
			rows.Close()
			return err
		}
		c := writeCRC(thread, ns, r.checkpoint, r.task, r.idx, r.channel, r.node, r.path, r.value)
		if writeCRC2(r.channel, r.node, r.path, r.value) != crc {
			c = spoil(c)
		}
		fixes = append(fixes, fix{rowid, c})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	upd, err := conn.PrepareContext(ctx, `UPDATE writes SET crc = ? WHERE rowid = ?`)
	if err != nil {
		return err
	}
	defer upd.Close()
	for _, f := range fixes {
		if _, err := upd.ExecContext(ctx, f.crc, f.rowid); err != nil {
			return err
		}
	}
	return nil
}
