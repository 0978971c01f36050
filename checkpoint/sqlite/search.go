package sqlite

import (
	"context"
	"database/sql"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Search implements checkpoint.Searcher: one query finds the threads that
// have a checkpoint opts could select (namespace, Before, and the
// metadata filters SQL can check), then each of them is listed as List
// lists it, and the lists are merged (checkpoint.SearchThreads). It fails
// as List does.
func (s *Saver) Search(ctx context.Context, opts checkpoint.ListOptions) ([]*checkpoint.Tuple, error) {
	if err := checkpoint.ValidateFilter(opts.Filter); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString(`SELECT DISTINCT thread_id FROM checkpoints WHERE pruned = 0`)
	args, _ := listWhere(&b, nil, opts)
	b.WriteString(` ORDER BY thread_id`)
	var threads []string
	err := s.read(ctx, opInfo{op: "search", ns: opts.NS}, func(c *sql.Conn) error {
		rows, err := c.QueryContext(ctx, b.String(), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var th string
			if err := rows.Scan(&th); err != nil {
				return err
			}
			threads = append(threads, th)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return checkpoint.SearchThreads(ctx, s, threads, opts)
}
