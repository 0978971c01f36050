package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// listThreads reads every thread's root-namespace head (its largest
// checkpoint ID), updated at the later of its creation and the last write
// of the thread's rows (a PutWrites, a Put that took or dropped the lease,
// a Put in a subgraph's namespace; a file written before leases were per
// thread may also have rows of other namespaces, which count too).
const listThreads = `SELECT thread_id, checkpoint_id, step, source, updated_at FROM (
	SELECT t.thread_id, c.checkpoint_id, c.step, c.source,
		max(coalesce((SELECT max(u.updated_at) FROM threads u WHERE u.thread_id = t.thread_id), ''), c.created_at) AS updated_at
	FROM threads t
	JOIN checkpoints c ON c.thread_id = t.thread_id AND c.checkpoint_ns = ''
		AND c.checkpoint_id = (SELECT max(m.checkpoint_id) FROM checkpoints m WHERE m.thread_id = t.thread_id AND m.checkpoint_ns = '')
	WHERE t.checkpoint_ns = '')
ORDER BY updated_at DESC, thread_id LIMIT CAST(? AS INTEGER) OFFSET CAST(? AS INTEGER)`

// Threads implements checkpoint.ThreadLister: every thread's root-namespace
// head (its largest checkpoint ID), most recently updated first (ties by
// thread ID), skipping offset and returning at most limit (0 means all).
// A thread was updated at the later of its head's created_at and the last
// write of its threads row (a PutWrites in any namespace, a Put that took
// or dropped the lease, or a Put in another namespace than the root's):
// the time of its last Put or PutWrites when, as the graph runtime does,
// checkpoints are created at the time they are saved. It returns a
// *StoreError when SQLite fails and a *checkpoint.CorruptError for an
// unreadable row.
func (s *Saver) Threads(ctx context.Context, offset, limit int) ([]checkpoint.ThreadInfo, error) {
	if limit <= 0 {
		limit = -1
	}
	offset = max(offset, 0)
	var out []checkpoint.ThreadInfo
	err := s.read(ctx, opInfo{op: "threads"}, func(c *sql.Conn) error {
		rows, err := c.QueryContext(ctx, listThreads, limit, offset)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ti checkpoint.ThreadInfo
			var step sql.NullInt64
			var source, updated sql.NullString
			if err := rows.Scan(&ti.Thread, &ti.Head, &step, &source, &updated); err != nil {
				return err
			}
			ti.Step, ti.Source = int(step.Int64), checkpoint.Source(source.String)
			if ti.UpdatedAt, err = parseTime(updated.String); err != nil {
				return &checkpoint.CorruptError{Thread: ti.Thread, Checkpoint: ti.Head, What: "thread row", Err: err}
			}
			out = append(out, ti)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// interruptRows lists the writes of tasks that raised an interrupt on a
// root-namespace head (pending interrupts are always rows of the writes
// table: a checkpoint's children add task writes, and the head has none),
// in the order the interrupt writes were first saved
// (rowid; a special write saved again keeps its row), starting at rowid ?1,
// for at most ?2 interrupt writes.
const interruptRows = `WITH cand AS (
	SELECT w.rowid AS seq, w.thread_id, w.checkpoint_id, w.task_id, w.created_at FROM writes w
	WHERE w.channel = '` + checkpoint.ChannelInterrupt + `' AND w.checkpoint_ns = '' AND w.rowid >= ?1
		AND w.checkpoint_id = (SELECT max(c.checkpoint_id) FROM checkpoints c WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = '')
	ORDER BY w.rowid LIMIT CAST(?2 AS INTEGER)
)
SELECT cand.seq, cand.created_at, x.checkpoint_ns, x.checkpoint_id, x.task_id, x.idx, x.channel, x.value, x.node, x.path, x.crc, x.thread_id
FROM cand JOIN writes x ON x.thread_id = cand.thread_id AND x.checkpoint_ns = '' AND x.checkpoint_id = cand.checkpoint_id AND x.task_id = cand.task_id
ORDER BY cand.seq, x.idx`

// interruptKey orders pending interrupts: save order of the interrupt
// write, then thread, then interrupt ID.
type interruptKey struct {
	seq            int64
	thread, intrID string
}

func (k interruptKey) compare(o interruptKey) int {
	return cmp.Or(cmp.Compare(k.seq, o.seq), strings.Compare(k.thread, o.thread), strings.Compare(k.intrID, o.intrID))
}

func (k interruptKey) String() string {
	return strconv.FormatInt(k.seq, 10) + "." + hex.EncodeToString([]byte(k.thread)) + "." + hex.EncodeToString([]byte(k.intrID))
}

func parseInterruptKey(s string) (interruptKey, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return interruptKey{}, false
	}
	seq, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || seq < 0 {
		return interruptKey{}, false
	}
	th, err1 := hex.DecodeString(parts[1])
	id, err2 := hex.DecodeString(parts[2])
	if err1 != nil || err2 != nil {
		return interruptKey{}, false
	}
	return interruptKey{seq, string(th), string(id)}, true
}

// PendingInterrupts implements checkpoint.InterruptLister: the interrupts
// of every thread's root-namespace head that still wait for an answer (the
// rule of checkpoint.PendingInterrupts), oldest first, one page at a time.
// The cursor is opaque. It orders interrupts by the rowid of their write
// (an interrupt write saved again keeps its row, so a walk never lists an
// interrupt twice: see checkpoint.InterruptQuery), so it stays valid while the
// database is not rebuilt with a full VACUUM; a page cursor kept across a
// DeleteThread or Prune that removed the newest writes of the whole file
// may skip an interrupt saved right after (SQLite may then reuse the
// largest rowid). It returns an error wrapping checkpoint.ErrInvalid
// for a malformed cursor, a *checkpoint.CorruptError for a write that does
// not verify, and a *StoreError when SQLite fails.
func (s *Saver) PendingInterrupts(ctx context.Context, q checkpoint.InterruptQuery) ([]checkpoint.PendingInterrupt, string, error) {
	var after interruptKey
	if q.After != "" {
		var ok bool
		if after, ok = parseInterruptKey(q.After); !ok {
			return nil, "", fmt.Errorf("%w: malformed interrupt cursor %q", checkpoint.ErrInvalid, q.After)
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	type item struct {
		key interruptKey
		pi  checkpoint.PendingInterrupt
	}
	var items []item
	// Interrupt IDs are unique within a checkpoint: the tasks that raised
	// each one seen, to report one raised twice (on this page or one
	// read with it) as corruption rather than list both.
	raised := map[[3]string]string{}
	err := s.read(ctx, opInfo{op: "pending interrupts"}, func(c *sql.Conn) error {
		from := after.seq
		batch := max(limit+1, 64)
		for len(items) <= limit {
			rows, err := c.QueryContext(ctx, interruptRows, from, batch)
			if err != nil {
				return err
			}
			type group struct {
				seq          int64
				created      string
				thread, cpID string
				writes       []checkpoint.PendingWrite
			}
			var groups []*group
			for rows.Next() {
				var seq int64
				var created, thread string
				var p pendingRow
				var value string
				if err := rows.Scan(&seq, &created, &p.ns, &p.checkpoint, &p.w.TaskID, &p.idx, &p.w.Channel, &value, &p.w.Node, &p.w.Path, &p.crc, &thread); err != nil {
					rows.Close()
					return err
				}
				p.w.Value = json.RawMessage(value)
				if err := p.verify(thread); err != nil {
					rows.Close()
					return err
				}
				if len(groups) == 0 || groups[len(groups)-1].seq != seq {
					groups = append(groups, &group{seq: seq, created: created, thread: thread, cpID: p.checkpoint})
				}
				g := groups[len(groups)-1]
				g.writes = append(g.writes, p.w)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			for _, g := range groups {
				at, err := parseTime(g.created)
				if err != nil {
					return &checkpoint.CorruptError{Thread: g.thread, Checkpoint: g.cpID, What: "interrupt write", Err: err}
				}
				pis, err := checkpoint.PendingInterrupts(g.thread, g.cpID, g.writes)
				if err != nil {
					return err
				}
				slices.SortStableFunc(pis, func(a, b checkpoint.PendingInterrupt) int { return strings.Compare(a.InterruptID, b.InterruptID) })
				for _, w := range g.writes {
					if w.Channel != checkpoint.ChannelInterrupt {
						continue
					}
					list, _ := checkpoint.DecodeInterrupts(w.Value) // PendingInterrupts decoded it
					for _, in := range list {
						k := [3]string{g.thread, g.cpID, in.ID}
						if other, dup := raised[k]; dup && other != w.TaskID {
							return &checkpoint.CorruptError{Thread: g.thread, Checkpoint: g.cpID,
								What: fmt.Sprintf("pending write of task %q channel %q", w.TaskID, w.Channel),
								Err:  fmt.Errorf("tasks %q and %q both raised interrupt %q", other, w.TaskID, in.ID)}
						}
						raised[k] = w.TaskID
					}
				}
				for _, pi := range pis {
					key := interruptKey{g.seq, g.thread, pi.InterruptID}
					if q.After != "" && key.compare(after) <= 0 {
						continue
					}
					pi.Thread, pi.NS, pi.CheckpointID, pi.CreatedAt = g.thread, "", g.cpID, at
					items = append(items, item{key, pi})
				}
			}
			if len(groups) < batch {
				break
			}
			from = groups[len(groups)-1].seq + 1
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = items[limit-1].key.String()
	}
	out := make([]checkpoint.PendingInterrupt, len(items))
	for i, it := range items {
		out[i] = it.pi
	}
	return out, next, nil
}

// Prune implements checkpoint.Pruner: it keeps the newest keep checkpoints
// of the thread's namespace, the head, and every checkpoint with pending
// writes that no child has committed (an interrupt waiting, a failed
// step), and deletes the rest with their pending writes, in one
// transaction. Channel data lives in the row of the checkpoint that wrote
// it, so a deleted checkpoint whose row holds versions a kept checkpoint's
// chains still read (the older items of an append channel) keeps its row,
// marked pruned and stripped to those channels: it is no longer a
// checkpoint (Get, List and forks do not see it; DeleteThread removes it)
// and a later Prune deletes it once no kept chain needs it. A checkpoint's
// children are never deleted while it is kept (they are newer), so its
// pending writes stay whole. The namespaces nested below ns whose first
// checkpoint names a deleted checkpoint in its parents (the subgraphs run
// by its tasks) are deleted whole, in the same transaction. It returns
// how many checkpoints were deleted (those of nested namespaces included),
// an error wrapping checkpoint.ErrInvalid when keep < 1 or the thread is
// empty, a *checkpoint.CorruptError when a kept checkpoint's chain is
// broken or a row it reads does not verify (then nothing is deleted), and
// a *StoreError when SQLite fails.
func (s *Saver) Prune(ctx context.Context, thread, ns string, keep int) (int, error) {
	if err := validThread(thread); err != nil {
		return 0, err
	}
	if keep < 1 {
		return 0, fmt.Errorf("%w: prune must keep at least 1 checkpoint, got %d", checkpoint.ErrInvalid, keep)
	}
	deleted := 0
	op := opInfo{op: "prune", thread: thread, ns: ns}
	err := s.write(ctx, op, "", func(t *wtx) error {
		rs := newRowSet(thread, ns)
		var live []*cpRow // ascending IDs
		rows, err := t.s.wconn.QueryContext(t.ctx, `SELECT `+cpColumns+` FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? ORDER BY checkpoint_id`, thread, ns)
		if err != nil {
			return err
		}
		for rows.Next() {
			r, err := scanRow(rows)
			if err != nil {
				rows.Close()
				return err
			}
			rs.add(r)
			if !r.pruned {
				live = append(live, r)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(live) == 0 {
			return nil
		}
		withWrites := map[string]bool{}
		wrows, err := t.s.wconn.QueryContext(t.ctx, `SELECT DISTINCT checkpoint_id FROM writes WHERE thread_id = ? AND checkpoint_ns = ?`, thread, ns)
		if err != nil {
			return err
		}
		for wrows.Next() {
			var id string
			if err := wrows.Scan(&id); err != nil {
				wrows.Close()
				return err
			}
			withWrites[id] = true
		}
		wrows.Close()
		if err := wrows.Err(); err != nil {
			return err
		}
		hasChild := map[string]bool{}
		for _, r := range live {
			hasChild[r.parent] = true
		}
		kept := map[string]bool{}
		for i := len(live) - 1; i >= 0 && len(live)-i <= keep; i-- {
			kept[live[i].id] = true // the newest, the head first
		}
		for _, r := range live {
			if withWrites[r.id] && !hasChild[r.id] {
				kept[r.id] = true
			}
		}
		// needed[version][channel]: the blobs kept checkpoints read.
		needed := map[string]map[string]bool{}
		for _, r := range live {
			if !kept[r.id] {
				continue
			}
			cp, err := r.checkpoint(thread)
			if err != nil {
				return errRollback{err}
			}
			for ch, v := range cp.Versions {
				chain, err := rs.chain(ch, v, "")
				if err != nil {
					return errRollback{rs.chainErr(cp.ID, ch, err)}
				}
				for _, b := range chain {
					if needed[b.Version] == nil {
						needed[b.Version] = map[string]bool{}
					}
					needed[b.Version][ch] = true
				}
			}
		}
		var drop []string // rows to delete
		for _, id := range sortedKeys(rs.rows) {
			r := rs.rows[id]
			if kept[id] {
				continue
			}
			if !r.pruned {
				deleted++
			}
			need := needed[id]
			if len(need) == 0 {
				drop = append(drop, id)
				continue
			}
			if err := t.strip(rs, r, need); err != nil {
				return err
			}
		}
		var gone []string // checkpoints whose pending writes go
		for _, r := range live {
			if !kept[r.id] {
				gone = append(gone, r.id)
			}
		}
		for _, del := range []struct {
			table string
			ids   []string
		}{{"writes", gone}, {"checkpoints", drop}} {
			if len(del.ids) == 0 {
				continue
			}
			ids, err := json.Marshal(del.ids)
			if err != nil {
				return err
			}
			if _, err := t.s.wconn.ExecContext(t.ctx, `DELETE FROM `+del.table+` WHERE thread_id = ?1 AND checkpoint_ns = ?2
AND checkpoint_id IN (SELECT value FROM json_each(?3))`, thread, ns, string(ids)); err != nil {
				return err
			}
		}
		if len(gone) == 0 {
			return nil
		}
		n, err := t.pruneNested(thread, ns, gone)
		deleted += n
		return err
	})
	if err != nil {
		return 0, err
	}
	return deleted, nil
}

// firstRows reads the first (smallest ID) live checkpoint of every
// namespace of a thread, after its namespace's count of live checkpoints.
const firstRows = `SELECT (SELECT count(*) FROM checkpoints n WHERE n.thread_id = ?1 AND n.checkpoint_ns = c.checkpoint_ns AND n.pruned = 0), ` + cpColumns + `
FROM checkpoints c WHERE c.thread_id = ?1 AND c.pruned = 0 AND c.checkpoint_id =
	(SELECT min(m.checkpoint_id) FROM checkpoints m WHERE m.thread_id = ?1 AND m.checkpoint_ns = c.checkpoint_ns AND m.pruned = 0)`

// pruneNested deletes the namespaces nested below ns whose first
// checkpoint names, in its metadata's parents[ns], a checkpoint in gone
// (one Prune just deleted): the subgraphs run by tasks of that
// checkpoint. It returns how many of their checkpoints it deleted, and a
// *checkpoint.CorruptError when such a first checkpoint does not verify
// (then nothing is deleted).
func (t *wtx) pruneNested(thread, ns string, gone []string) (int, error) {
	deleted := make(map[string]bool, len(gone))
	for _, id := range gone {
		deleted[id] = true
	}
	rows, err := t.s.wconn.QueryContext(t.ctx, firstRows, thread)
	if err != nil {
		return 0, err
	}
	var drop []string
	n := 0
	for rows.Next() {
		var live int
		r, err := scanRow(rows, &live)
		if err != nil {
			rows.Close()
			return 0, err
		}
		if !checkpoint.NestedIn(r.ns, ns) {
			continue
		}
		cp, err := r.checkpoint(thread)
		if err != nil {
			rows.Close()
			return 0, errRollback{err}
		}
		if deleted[cp.Metadata.Parents[ns]] {
			drop = append(drop, r.ns)
			n += live
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(drop) == 0 {
		return 0, nil
	}
	nss, err := json.Marshal(drop)
	if err != nil {
		return 0, err
	}
	for _, table := range []string{"writes", "checkpoints"} {
		if _, err := t.s.wconn.ExecContext(t.ctx, `DELETE FROM `+table+` WHERE thread_id = ?1 AND checkpoint_ns IN (SELECT value FROM json_each(?2))`, thread, string(nss)); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// strip turns the row of a pruned checkpoint into a pruned row holding
// only the channels in need (unchanged when it already is one).
func (t *wtx) strip(rs *rowSet, r *cpRow, need map[string]bool) error {
	have, err := r.blobs(rs.thread)
	if err != nil {
		return errRollback{err}
	}
	if r.pruned && len(have) == len(need) {
		return nil
	}
	chans := []byte{'{'}
	for _, e := range have {
		if !need[e.channel] {
			continue
		}
		if len(chans) > 1 {
			chans = append(chans, ',')
		}
		chans = appendBlob(appendString(chans, e.channel), e.blob)
	}
	chans = append(chans, '}')
	crc := rowCRC(rs.thread, rs.ns, r.id, r.parent, r.step, r.source, r.created, []byte("{}"), []byte("{}"), chans, nil, "", true)
	if t.s.version < linksSchema {
		_, err = t.s.wconn.ExecContext(t.ctx, `UPDATE checkpoints SET metadata = '{}', versions = '{}', channels = ?4, task_writes = NULL, mark = '', pruned = 1, crc = ?5
WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3`, rs.thread, rs.ns, r.id, string(chans), crc)
		return err
	}
	links := linksOf(have, func(ch string) bool { return need[ch] })
	_, err = t.s.wconn.ExecContext(t.ctx, `UPDATE checkpoints SET metadata = '{}', versions = '{}', channels = ?4, task_writes = NULL, mark = '', pruned = 1, crc = ?5, links = ?6
WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3`, rs.thread, rs.ns, r.id, string(chans), crc, links)
	return err
}

// Vacuum implements checkpoint.Vacuumer: it gives up to pages free pages
// back to the file system (0: all of them) with PRAGMA incremental_vacuum.
// Files created by this package use auto_vacuum=INCREMENTAL; on an older
// file without it, Vacuum does nothing. It returns a *StoreError when
// SQLite fails and an error wrapping checkpoint.ErrInvalid when pages < 0.
func (s *Saver) Vacuum(ctx context.Context, pages int) error {
	if pages < 0 {
		return fmt.Errorf("%w: vacuum pages %d is negative", checkpoint.ErrInvalid, pages)
	}
	if err := s.live(); err != nil {
		return err
	}
	select {
	case s.wsem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.wsem }()
	if err := s.live(); err != nil {
		return err
	}
	op := opInfo{op: "vacuum"}
	if _, err := s.writer(ctx); err != nil {
		return op.storeErr(err)
	}
	if err := s.checkWALInUse(); err != nil {
		return s.saveDetachedWAL(detached(ctx))
	}
	s.heads.reset(-1)
	// The pragma frees one page per step: read it to the end.
	rows, err := s.wconn.QueryContext(ctx, "PRAGMA incremental_vacuum("+strconv.Itoa(pages)+")")
	if err != nil {
		return op.storeErr(err)
	}
	for rows.Next() {
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return op.storeErr(err)
	}
	return nil
}
