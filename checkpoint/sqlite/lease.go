package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

var _ checkpoint.LeaseInspector = (*Saver)(nil)

// Lease implements checkpoint.LeaseInspector: it reads the thread's row
// (the lease's owner, runner, epoch and end), which every namespace
// shares, in a read transaction. It returns an error wrapping
// checkpoint.ErrInvalid for an empty thread, one matching
// checkpoint.ErrNotFound when the file holds no row for the thread, and a
// *StoreError when SQLite fails.
func (s *Saver) Lease(ctx context.Context, thread, ns string) (checkpoint.LeaseInfo, error) {
	if err := validThread(thread); err != nil {
		return checkpoint.LeaseInfo{}, err
	}
	info := checkpoint.LeaseInfo{Thread: thread, NS: ns}
	err := s.read(ctx, opInfo{op: "lease", thread: thread, ns: ns}, func(c *sql.Conn) error {
		var owner, runner sql.NullString
		var until sql.NullInt64
		var epoch int64
		err := c.QueryRowContext(ctx, selectThread, thread).Scan(&owner, &until, &runner, &epoch)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: thread %q has no checkpoint and no lease", checkpoint.ErrNotFound, thread)
		}
		if err != nil {
			return err
		}
		info.Owner, info.Runner, info.Epoch = owner.String, runner.String, uint64(epoch)
		if owner.Valid && until.Valid {
			info.Until = time.Unix(0, until.Int64).UTC()
		}
		return nil
	})
	if err != nil {
		return checkpoint.LeaseInfo{}, err
	}
	return info, nil
}
