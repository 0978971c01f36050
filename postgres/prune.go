package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
)

const (
	pruneRowsSQL = `SELECT c.checkpoint_id, c.parent_checkpoint_id, c.versions,
	EXISTS (SELECT 1 FROM $S.writes w WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id)
FROM $S.checkpoints c WHERE c.thread_id = $1::text AND c.checkpoint_ns = $2::text`
	pruneBlobsSQL  = `SELECT channel, version, kind, base FROM $S.blobs WHERE thread_id = $1::text AND checkpoint_ns = $2::text`
	pruneDeleteSQL = `WITH
w AS (DELETE FROM $S.writes WHERE thread_id = $1::text AND checkpoint_ns = $2::text AND checkpoint_id = ANY($3::text[])),
b AS (DELETE FROM $S.blobs b USING unnest($4::text[], $5::text[]) AS k(channel, version)
	WHERE b.thread_id = $1::text AND b.checkpoint_ns = $2::text AND b.channel = k.channel AND b.version = k.version)
DELETE FROM $S.checkpoints WHERE thread_id = $1::text AND checkpoint_ns = $2::text AND checkpoint_id = ANY($3::text[])`
)

const (
	pruneNestedSQL = `SELECT DISTINCT ON (checkpoint_ns) checkpoint_ns, metadata, metadata_text,
	count(*) OVER (PARTITION BY checkpoint_ns)
FROM $S.checkpoints WHERE thread_id = $1::text AND checkpoint_ns <> $2::text
ORDER BY checkpoint_ns, checkpoint_id`
	pruneDropNSSQL = `WITH
w AS (DELETE FROM $S.writes WHERE thread_id = $1::text AND checkpoint_ns = ANY($2::text[])),
b AS (DELETE FROM $S.blobs WHERE thread_id = $1::text AND checkpoint_ns = ANY($2::text[])),
c AS (DELETE FROM $S.checkpoints WHERE thread_id = $1::text AND checkpoint_ns = ANY($2::text[]))
DELETE FROM $S.threads WHERE thread_id = $1::text AND checkpoint_ns = ANY($2::text[]) AND checkpoint_ns <> ''`
)

// Prune implements checkpoint.Pruner, in one transaction that locks the
// thread's row: it keeps the head, the newest keep checkpoints and those
// with pending writes no child has committed, and the blobs their chains
// need, and deletes the rest with their writes, and the namespaces of the
// subgraphs their tasks ran. It returns how many
// checkpoints it deleted; an error wrapping checkpoint.ErrInvalid for an
// empty thread or keep < 1, a *checkpoint.CorruptError (deleting nothing)
// when a kept chain is broken, ctx's error, checkpoint.ErrClosed, or a
// *StoreError.
func (s *Saver) Prune(ctx context.Context, thread, ns string, keep int) (int, error) {
	if thread == "" {
		return 0, fmt.Errorf("%w: empty thread ID", checkpoint.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if keep < 1 {
		return 0, fmt.Errorf("%w: prune must keep at least 1 checkpoint, got %d", checkpoint.ErrInvalid, keep)
	}
	if err := s.live(); err != nil {
		return 0, err
	}
	deleted := 0
	err := pgx.BeginFunc(ctx, s.db.pool, func(tx pgx.Tx) error {
		var head *string
		err := tx.QueryRow(ctx, sqlFor(s.db.schema, `SELECT head FROM $S.threads WHERE thread_id = $1::text AND checkpoint_ns = $2::text FOR UPDATE`), thread, ns).Scan(&head)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		type cpInfo struct {
			parent   string
			versions map[string]string
			writes   bool
		}
		cps := map[string]*cpInfo{}
		var ids []string
		rows, err := tx.Query(ctx, sqlFor(s.db.schema, pruneRowsSQL), thread, ns)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var parent *string
			var vers []byte
			c := &cpInfo{}
			if err := rows.Scan(&id, &parent, &vers, &c.writes); err != nil {
				rows.Close()
				return err
			}
			if parent != nil {
				c.parent = *parent
			}
			if err := versionsJSON.Check(vers); err != nil {
				rows.Close()
				return &checkpoint.CorruptError{Thread: thread, Checkpoint: id, What: "checkpoint", Err: err}
			}
			if err := jsonUnmarshal(vers, &c.versions); err != nil {
				rows.Close()
				return &checkpoint.CorruptError{Thread: thread, Checkpoint: id, What: "checkpoint", Err: err}
			}
			cps[id] = c
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		sortStrings(ids)
		hasChild := map[string]bool{}
		for _, c := range cps {
			hasChild[c.parent] = true
		}
		kept := map[string]bool{}
		if head != nil {
			kept[*head] = true
		}
		for i := len(ids) - 1; i >= 0 && len(ids)-i <= keep; i-- {
			kept[ids[i]] = true
		}
		for id, c := range cps {
			if c.writes && !hasChild[id] {
				kept[id] = true
			}
		}
		type bk struct{ ch, v string }
		type binfo struct {
			appendTo string
			isAppend bool
		}
		blobs := map[bk]binfo{}
		brows, err := tx.Query(ctx, sqlFor(s.db.schema, pruneBlobsSQL), thread, ns)
		if err != nil {
			return err
		}
		for brows.Next() {
			var ch, v, kind, base string
			if err := brows.Scan(&ch, &v, &kind, &base); err != nil {
				brows.Close()
				return err
			}
			blobs[bk{ch, v}] = binfo{appendTo: base, isAppend: kind == "append"}
		}
		brows.Close()
		if err := brows.Err(); err != nil {
			return err
		}
		needed := map[bk]bool{}
		for id := range kept {
			c := cps[id]
			if c == nil {
				continue
			}
			for ch, v := range c.versions {
				for n := 0; ; n++ {
					b, ok := blobs[bk{ch, v}]
					if !ok || n > len(blobs) {
						return &checkpoint.CorruptError{Thread: thread, Checkpoint: id, What: "channel " + ch, Err: fmt.Errorf("missing blob for version %q", v)}
					}
					needed[bk{ch, v}] = true
					if !b.isAppend || b.appendTo == "" {
						break
					}
					v = b.appendTo
				}
			}
		}
		var gone []string
		for _, id := range ids {
			if !kept[id] {
				gone = append(gone, id)
			}
		}
		var bch, bver []string
		for k := range blobs {
			if !needed[k] {
				bch, bver = append(bch, k.ch), append(bver, k.v)
			}
		}
		if len(gone) == 0 && len(bch) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, sqlFor(s.db.schema, pruneDeleteSQL), thread, ns, gone, bch, bver); err != nil {
			return err
		}
		deleted = len(gone)
		// The namespaces of subgraphs that tasks of deleted checkpoints ran
		// go with them, whole: their first checkpoint names the deleted one
		// as its parent in ns (see checkpoint.Pruner).
		goneSet := map[string]bool{}
		for _, id := range gone {
			goneSet[id] = true
		}
		nrows, err := tx.Query(ctx, sqlFor(s.db.schema, pruneNestedSQL), thread, ns)
		if err != nil {
			return err
		}
		var drop []string
		for nrows.Next() {
			var k string
			var meta []byte
			var text *string
			var n int64
			if err := nrows.Scan(&k, &meta, &text, &n); err != nil {
				nrows.Close()
				return err
			}
			if !checkpoint.NestedIn(k, ns) {
				continue
			}
			if text != nil {
				meta = []byte(*text)
			}
			var m checkpoint.Metadata
			if err := jsonUnmarshal(meta, &m); err != nil {
				nrows.Close()
				return &checkpoint.CorruptError{Thread: thread, Checkpoint: "", What: "metadata of namespace " + quote(k), Err: err}
			}
			if goneSet[m.Parents[ns]] {
				drop = append(drop, k)
				deleted += int(n)
			}
		}
		nrows.Close()
		if err := nrows.Err(); err != nil {
			return err
		}
		if len(drop) > 0 {
			if _, err := tx.Exec(ctx, sqlFor(s.db.schema, pruneDropNSSQL), thread, drop); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		var ce *checkpoint.CorruptError
		if errors.As(err, &ce) {
			return 0, err
		}
		return 0, s.writeErr("prune", thread, err, nil)
	}
	return deleted, nil
}
