package postgres

import (
	"context"
	"fmt"
	"os"
)

// helperOpen opens the database of LOCKSTEP_POSTGRES_URL in the schema
// LOCKSTEP_POSTGRES_SCHEMA and exits 0, or prints the error and exits 1.
func helperOpen() int {
	db, err := Open(context.Background(), os.Getenv("LOCKSTEP_POSTGRES_URL"), Config{Schema: os.Getenv("LOCKSTEP_POSTGRES_SCHEMA"), MaxConns: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	db.Close()
	return 0
}
