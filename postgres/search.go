package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// searchThreadsSQL finds the threads with a checkpoint Search could select
// by namespace and Before ($1 ns, $2 all namespaces, $3 before or NULL);
// the metadata filter is checked by List.
const searchThreadsSQL = `SELECT DISTINCT thread_id FROM $S.checkpoints
WHERE ($2::boolean OR checkpoint_ns = $1::text) AND ($3::text IS NULL OR checkpoint_id < $3::text)
ORDER BY thread_id`

// Search implements checkpoint.Searcher: in one repeatable-read
// snapshot, the threads that have a checkpoint opts could select, each
// listed as List lists it, merged in Search's order
// (checkpoint.SortSearch). It fails as List does.
func (s *Saver) Search(ctx context.Context, opts checkpoint.ListOptions) ([]*checkpoint.Tuple, error) {
	if err := checkpoint.ValidateFilter(opts.Filter); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.live(); err != nil {
		return nil, err
	}
	out := []*checkpoint.Tuple{}
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlFor(s.db.schema, searchThreadsSQL), opts.NS, opts.AllNamespaces, nullable(opts.Before))
		if err != nil {
			return err
		}
		var threads []string
		for rows.Next() {
			var th string
			if err := rows.Scan(&th); err != nil {
				rows.Close()
				return err
			}
			threads = append(threads, th)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, th := range threads {
			tps, err := s.list(ctx, tx, th, opts)
			if err != nil {
				return err
			}
			out = append(out, tps...)
		}
		return nil
	})
	if err != nil {
		var ce *checkpoint.CorruptError
		if errors.As(err, &ce) || errors.Is(err, checkpoint.ErrInvalid) {
			return nil, err
		}
		return nil, s.readErr("search", "", err)
	}
	return checkpoint.SortSearch(out, opts.Limit), nil
}
