package approval

import (
	"context"
	"database/sql"
)

// RechecksumRows gives every row of the approval tables in db the
// checksum of what it holds now (every column of the current schema),
// as the migration to schema version 2 does: a test edits a row's contents, and this makes only the strict
// decoding, not the checksum, stand between the edit and a reader.
func RechecksumRows(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := rechecksum(ctx, tx, recordColumns, len(new(decisionRow).dest())); err != nil {
		return err
	}
	return tx.Commit()
}
