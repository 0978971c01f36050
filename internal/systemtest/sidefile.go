package systemtest

import (
	"database/sql"
	"fmt"
)

// OpenSideFile opens a plain SQLite file that plays a system beside the
// engine's (a payment provider, a message feed): WAL, a 10 s busy
// timeout and immediate transactions, so that several processes can
// share it, with schema applied. It is never opened through injected
// faults. It returns the error of opening the file or of applying schema,
// having closed the file.
func OpenSideFile(path, schema string) (*sql.DB, error) {
	db, err := sql.Open("sqlite3", path+"?_journal_mode=WAL&_busy_timeout=10000&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("side file %s: schema: %w", path, err)
	}
	return db, nil
}
