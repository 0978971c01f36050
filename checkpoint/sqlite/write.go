package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// threadRow is the part of a threads row the write rules need.
type threadRow struct {
	exists bool
	head   string
	owner  string
	until  int64
}

const selectThread = `SELECT head_checkpoint_id, lease_owner, lease_until FROM threads WHERE thread_id = ? AND checkpoint_ns = ?`

func (t *wtx) thread(thread, ns string) (threadRow, error) {
	var head, owner sql.NullString
	var until sql.NullInt64
	err := t.queryRow(selectThread, thread, ns).Scan(&head, &owner, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return threadRow{}, nil
	}
	if err != nil {
		return threadRow{}, err
	}
	return threadRow{exists: true, head: head.String, owner: owner.String, until: until.Int64}, nil
}

// lease returns the lease columns a write stores: the owner and expiry, or
// NULLs when the request releases the lease.
func lease(l checkpoint.Lease, release bool, now time.Time) (owner, until any) {
	if release {
		return nil, nil
	}
	return l.Owner, now.Add(l.TTL).UnixNano()
}

// The fast paths update the thread row only when the lease and the head
// allow it; when they match no row the slow path reads the row and decides
// exactly as the rules of package checkpoint say.
const (
	updateHeadCAS = `UPDATE threads SET head_checkpoint_id = ?, step = ?, source = ?, updated_at = ?, lease_owner = ?, lease_until = ?
WHERE thread_id = ? AND checkpoint_ns = ? AND head_checkpoint_id IS ? AND (lease_owner IS NULL OR lease_owner = ? OR lease_until <= ?)`
	updateHead = `UPDATE threads SET head_checkpoint_id = ?, step = ?, source = ?, updated_at = ?, lease_owner = ?, lease_until = ?
WHERE thread_id = ? AND checkpoint_ns = ?`
	insertThread = `INSERT INTO threads (thread_id, checkpoint_ns, head_checkpoint_id, step, source, lease_owner, lease_until, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	insertCheckpoint = `INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, step, source, created_at, metadata, versions, mark, crc)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	checkpointExists = `SELECT 1 FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?`
)

// encodedCheckpoint is a checkpoint row ready to insert.
type encodedCheckpoint struct {
	created  string
	metadata string
	versions string
	crc      int64
}

func encodeCheckpoint(cp *checkpoint.Checkpoint, now time.Time) (encodedCheckpoint, error) {
	meta, err := json.Marshal(cp.Metadata)
	if err != nil {
		return encodedCheckpoint{}, fmt.Errorf("%w: checkpoint %s: metadata: %v", checkpoint.ErrInvalid, cp.ID, err)
	}
	versions, err := json.Marshal(cp.Versions)
	if err != nil {
		return encodedCheckpoint{}, fmt.Errorf("%w: checkpoint %s: versions: %v", checkpoint.ErrInvalid, cp.ID, err)
	}
	created := cp.CreatedAt
	if created.IsZero() {
		created = now
	}
	e := encodedCheckpoint{created: formatTime(created), metadata: string(meta), versions: string(versions)}
	e.crc = checkpointCRC(cp.ParentID, e.created, e.metadata, e.versions, cp.Mark)
	return e, nil
}

func checkpointCRC(parent, created, metadata, versions, mark string) int64 {
	return crcString(parent, created, metadata, versions, mark)
}

func blobCRC(kind, base string, value []byte) int64 {
	return crcOf([]byte(kind), []byte(base), value)
}

func writeCRC(channel, node, path string, value []byte) int64 {
	return crcOf([]byte(channel), []byte(node), []byte(path), value)
}

// blobRow is one blobs row to insert.
type blobRowIn struct {
	channel, base, kind string
	value               []byte
}

// writeRow is one writes row to insert.
type writeRow struct {
	checkpoint string
	task       string
	idx        int
	channel    string
	value      []byte
	node, path string
	special    bool
}

func writeRows(dst []writeRow, cpID string, tasks []checkpoint.TaskWrites) []writeRow {
	for _, tw := range tasks {
		for pos, w := range tw.Writes {
			dst = append(dst, writeRow{
				checkpoint: cpID, task: tw.TaskID, idx: checkpoint.WriteIndex(w.Channel, pos),
				channel: w.Channel, value: w.Value, node: tw.Node, path: tw.Path,
				special: checkpoint.IsSpecial(w.Channel),
			})
		}
	}
	return dst
}

// maxRowsPerInsert bounds a multi-row INSERT (11 parameters a row, far
// below SQLite's limit of 32766).
const maxRowsPerInsert = 32

// multiInsert returns "<head> VALUES (?,...),(?,...)<tail>" for n rows of
// cols columns. The text is a key of the writer's statement cache.
func multiInsert(head string, cols, n int, tail string) string {
	var b strings.Builder
	b.Grow(len(head) + len(tail) + 8 + n*(2*cols+2))
	b.WriteString(head)
	b.WriteString(" VALUES ")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for j := 0; j < cols; j++ {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('?')
		}
		b.WriteByte(')')
	}
	b.WriteString(tail)
	return b.String()
}

const (
	blobsHead = `INSERT INTO blobs (thread_id, checkpoint_ns, channel, version, base, kind, value, crc)`
	// Regular writes are insert-if-absent, special ones replace (a
	// replaced row gets a new rowid, which orders pending interrupts).
	writesHeadRegular = `INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path, created_at, crc)`
	writesHeadSpecial = `INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path, created_at, crc)`
	writesTailRegular = ` ON CONFLICT DO NOTHING`
)

func (t *wtx) insertBlobs(thread, ns, version string, rows []blobRowIn) error {
	for len(rows) > 0 {
		n := min(len(rows), maxRowsPerInsert)
		args := make([]any, 0, 8*n)
		for _, r := range rows[:n] {
			args = append(args, thread, ns, r.channel, version, r.base, r.kind, string(r.value), blobCRC(r.kind, r.base, r.value))
		}
		if _, err := t.exec(multiInsert(blobsHead, 8, n, ""), args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// insertWrites saves rows in order. Consecutive rows of the same kind go
// in one statement; a regular row is ignored when its (task, index)
// exists, a special one replaces it, exactly as if the rows were saved one
// by one.
func (t *wtx) insertWrites(thread, ns string, rows []writeRow, created string) error {
	for len(rows) > 0 {
		n := 1
		for n < len(rows) && n < maxRowsPerInsert && rows[n].special == rows[0].special {
			n++
		}
		args := make([]any, 0, 11*n)
		for _, r := range rows[:n] {
			args = append(args, thread, ns, r.checkpoint, r.task, r.idx, r.channel, string(r.value), r.node, r.path, created, writeCRC(r.channel, r.node, r.path, r.value))
		}
		q := multiInsert(writesHeadRegular, 11, n, writesTailRegular)
		if rows[0].special {
			q = multiInsert(writesHeadSpecial, 11, n, "")
		}
		if _, err := t.exec(q, args...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// Put implements checkpoint.Saver: in one IMMEDIATE transaction it checks
// and takes the lease, moves the head from the parent to the new
// checkpoint (compare-and-swap, unless req.Fork), and inserts the
// checkpoint, the blobs of its changed channels, req.ParentWrites as
// pending writes of the parent and req.Writes as pending writes of the new
// checkpoint. It returns an error wrapping checkpoint.ErrInvalid for a
// malformed request, a *checkpoint.BusyError or *checkpoint.ConflictError
// when another runner owns or advanced the thread (also when the ID is
// already taken), and a *StoreError when SQLite fails (ErrStoreBusy: retry;
// ErrCommitIndeterminate: re-read the head). Nothing is written on any
// error but an indeterminate commit.
func (s *Saver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	if err := checkpoint.ValidatePut(&req); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	now := s.cfg.now()
	cp := &req.Checkpoint
	enc, err := encodeCheckpoint(cp, now)
	if err != nil {
		return err
	}
	chans := make([]string, 0, len(cp.Channels))
	for ch := range cp.Channels {
		chans = append(chans, ch)
	}
	slices.Sort(chans)
	blobs := make([]blobRowIn, 0, len(chans))
	for _, ch := range chans {
		b := cp.Channels[ch][0]
		kind := "value"
		if b.Append {
			kind = "append"
		}
		blobs = append(blobs, blobRowIn{channel: ch, base: b.Base, kind: kind, value: b.Data})
	}
	var writes []writeRow
	if cp.ParentID != "" {
		writes = writeRows(writes, cp.ParentID, req.ParentWrites)
	}
	writes = writeRows(writes, cp.ID, req.Writes)
	nowText := formatTime(now)
	owner, until := lease(req.Lease, req.Release, now)
	meta := &cp.Metadata
	op := opInfo{op: "put", thread: req.Thread, ns: req.NS, checkpoint: cp.ID}
	return s.write(ctx, op, "sqlite.put", func(t *wtx) error {
		n := int64(0)
		if !req.Fork {
			var err error
			n, err = t.exec(updateHeadCAS, cp.ID, meta.Step, string(meta.Source), nowText, owner, until,
				req.Thread, req.NS, nullable(cp.ParentID), req.Lease.Owner, now.UnixNano())
			if err != nil {
				return err
			}
		}
		if n == 0 {
			row, err := t.thread(req.Thread, req.NS)
			if err != nil {
				return err
			}
			if row.exists {
				if err := leaseBusy(req.Thread, req.NS, row.owner, row.until, req.Lease.Owner, now); err != nil {
					return errRollback{err}
				}
			}
			conflict := &checkpoint.ConflictError{Thread: req.Thread, NS: req.NS, Expected: cp.ParentID, Head: row.head}
			if req.Fork {
				if cp.ParentID != "" {
					if !row.exists {
						return errRollback{conflict}
					}
					var one int
					err := t.queryRow(checkpointExists, req.Thread, req.NS, cp.ParentID).Scan(&one)
					if errors.Is(err, sql.ErrNoRows) {
						return errRollback{conflict}
					}
					if err != nil {
						return err
					}
				}
			} else if row.head != cp.ParentID {
				return errRollback{conflict}
			}
			if row.exists {
				_, err = t.exec(updateHead, cp.ID, meta.Step, string(meta.Source), nowText, owner, until, req.Thread, req.NS)
			} else {
				_, err = t.exec(insertThread, req.Thread, req.NS, cp.ID, meta.Step, string(meta.Source), owner, until, nowText)
			}
			if err != nil {
				return err
			}
			if _, err := t.exec(insertCheckpoint, req.Thread, req.NS, cp.ID, nullable(cp.ParentID), meta.Step, string(meta.Source),
				enc.created, enc.metadata, enc.versions, cp.Mark, enc.crc); err != nil {
				if isConstraint(err) {
					return errRollback{conflict}
				}
				return err
			}
		} else if _, err := t.exec(insertCheckpoint, req.Thread, req.NS, cp.ID, nullable(cp.ParentID), meta.Step, string(meta.Source),
			enc.created, enc.metadata, enc.versions, cp.Mark, enc.crc); err != nil {
			if isConstraint(err) {
				return errRollback{&checkpoint.ConflictError{Thread: req.Thread, NS: req.NS, Expected: cp.ParentID, Head: cp.ParentID}}
			}
			return err
		}
		if err := t.insertBlobs(req.Thread, req.NS, cp.ID, blobs); err != nil {
			return err
		}
		return t.insertWrites(req.Thread, req.NS, writes, nowText)
	})
}

const (
	updateLeaseCAS = `UPDATE threads SET updated_at = ?, lease_owner = ?, lease_until = ?
WHERE thread_id = ? AND checkpoint_ns = ? AND head_checkpoint_id = ? AND (lease_owner IS NULL OR lease_owner = ? OR lease_until <= ?)`
	updateLease = `UPDATE threads SET updated_at = ?, lease_owner = ?, lease_until = ? WHERE thread_id = ? AND checkpoint_ns = ?`
)

// PutWrites implements checkpoint.Saver: it saves the tasks' writes as
// pending writes of the head checkpoint (regular writes insert-if-absent,
// special ones replace), taking or renewing the lease, in one IMMEDIATE
// transaction. It returns an error wrapping checkpoint.ErrInvalid for a
// malformed request, a *checkpoint.ConflictError when req.Ref.ID is not the
// head, a *checkpoint.BusyError when another runner holds the lease, and a
// *StoreError when SQLite fails; nothing is written on any error but an
// indeterminate commit (ErrCommitIndeterminate).
func (s *Saver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	if err := checkpoint.ValidateWrites(&req); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	now := s.cfg.now()
	nowText := formatTime(now)
	rows := writeRows(nil, req.Ref.ID, req.Tasks)
	owner, until := lease(req.Lease, req.Release, now)
	ref := req.Ref
	op := opInfo{op: "put writes", thread: ref.Thread, ns: ref.NS, checkpoint: ref.ID}
	return s.write(ctx, op, "sqlite.writes", func(t *wtx) error {
		n, err := t.exec(updateLeaseCAS, nowText, owner, until, ref.Thread, ref.NS, ref.ID, req.Lease.Owner, now.UnixNano())
		if err != nil {
			return err
		}
		if n == 0 {
			row, err := t.thread(ref.Thread, ref.NS)
			if err != nil {
				return err
			}
			if !row.exists || row.head != ref.ID {
				return errRollback{&checkpoint.ConflictError{Thread: ref.Thread, NS: ref.NS, Expected: ref.ID, Head: row.head}}
			}
			if err := leaseBusy(ref.Thread, ref.NS, row.owner, row.until, req.Lease.Owner, now); err != nil {
				return errRollback{err}
			}
			if _, err := t.exec(updateLease, nowText, owner, until, ref.Thread, ref.NS); err != nil {
				return err
			}
		}
		return t.insertWrites(ref.Thread, ref.NS, rows, nowText)
	})
}

const (
	claimCAS = `UPDATE threads SET lease_owner = ?, lease_until = ?
WHERE thread_id = ? AND checkpoint_ns = ? AND head_checkpoint_id IS ? AND (lease_owner IS NULL OR lease_owner = ? OR lease_until <= ?)`
	claimSet    = `UPDATE threads SET lease_owner = ?, lease_until = ? WHERE thread_id = ? AND checkpoint_ns = ?`
	claimInsert = `INSERT INTO threads (thread_id, checkpoint_ns, head_checkpoint_id, lease_owner, lease_until, updated_at) VALUES (?, ?, NULL, ?, ?, ?)`
)

// Claim implements checkpoint.Saver: it takes or renews the lease on a
// thread whose head is ref.ID ("" for a thread with no checkpoint, which
// creates the thread's row). It returns a *checkpoint.ConflictError when
// ref.ID is not the head, an error wrapping checkpoint.ErrInvalid for an
// empty owner, a *checkpoint.BusyError when another runner holds the lease,
// and a *StoreError when SQLite fails.
func (s *Saver) Claim(ctx context.Context, ref checkpoint.Ref, l checkpoint.Lease) error {
	if err := validThread(ref.Thread); err != nil {
		return err
	}
	now := s.cfg.now()
	op := opInfo{op: "claim", thread: ref.Thread, ns: ref.NS, checkpoint: ref.ID}
	until := now.Add(l.TTL).UnixNano()
	return s.write(ctx, op, "", func(t *wtx) error {
		if l.Owner != "" {
			n, err := t.exec(claimCAS, l.Owner, until, ref.Thread, ref.NS, nullable(ref.ID), l.Owner, now.UnixNano())
			if err != nil || n == 1 {
				return err
			}
		}
		row, err := t.thread(ref.Thread, ref.NS)
		if err != nil {
			return err
		}
		if row.head != ref.ID {
			return errRollback{&checkpoint.ConflictError{Thread: ref.Thread, NS: ref.NS, Expected: ref.ID, Head: row.head}}
		}
		if l.Owner == "" {
			return errRollback{fmt.Errorf("%w: empty lease owner", checkpoint.ErrInvalid)}
		}
		if err := leaseBusy(ref.Thread, ref.NS, row.owner, row.until, l.Owner, now); err != nil {
			return errRollback{err}
		}
		if row.exists {
			_, err = t.exec(claimSet, l.Owner, until, ref.Thread, ref.NS)
		} else {
			_, err = t.exec(claimInsert, ref.Thread, ref.NS, l.Owner, until, formatTime(now))
		}
		return err
	})
}

// Release implements checkpoint.Saver: it drops owner's lease on the
// thread if owner holds it (a thread row created by Claim alone goes with
// it). It is not an error when the lease expired or passed on; it returns a
// *StoreError when SQLite fails.
func (s *Saver) Release(ctx context.Context, thread, ns, owner string) error {
	op := opInfo{op: "release", thread: thread, ns: ns}
	return s.write(ctx, op, "", func(t *wtx) error {
		n, err := t.exec(`UPDATE threads SET lease_owner = NULL, lease_until = NULL WHERE thread_id = ? AND checkpoint_ns = ? AND lease_owner IS ?`,
			thread, ns, nullable(owner))
		if err != nil || n == 0 {
			return err
		}
		_, err = t.exec(`DELETE FROM threads WHERE thread_id = ? AND checkpoint_ns = ? AND head_checkpoint_id IS NULL`, thread, ns)
		return err
	})
}

// DeleteThread implements checkpoint.Saver: it deletes every checkpoint,
// blob, pending write and lease of the thread, in every namespace, in one
// transaction. Deleting a missing thread is not an error. It returns an
// error wrapping checkpoint.ErrInvalid for an empty thread and a
// *StoreError when SQLite fails.
func (s *Saver) DeleteThread(ctx context.Context, thread string) error {
	if err := validThread(thread); err != nil {
		return err
	}
	op := opInfo{op: "delete thread", thread: thread}
	return s.write(ctx, op, "", func(t *wtx) error {
		for _, table := range []string{"writes", "blobs", "checkpoints", "threads"} {
			if _, err := t.exec("DELETE FROM "+table+" WHERE thread_id = ?", thread); err != nil {
				return err
			}
		}
		return nil
	})
}
